"""The loop's secondary base over stored data: how many secondary-provider nodes of a SKU to hold.

The decision is the simulator's (:class:`gpufleet.control.secondary_base.SecondaryBase`, ``ControlLoop.gpufleet``'s
``secondary_base``, reason ``secondary_base``), asked on what the store measured: the SKU's GPUs in use on its
on-demand and secondary-provider pools per hour (utilization records naming a pool of those tiers; hours without a
record 0) over the rule's window, the cheapest secondary pool with a stored quota (its room, in whole nodes) and
the cheapest on-demand price of the SKU. The simulator launches the nodes it decides; the service has no
secondary provider's API to rent nodes through, so it reports the decision (``POST /v1/plans:propose``, the
reconciler's pass) for whoever rents them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import PoolRow, UtilizationRow
from gpufleet.control.secondary_base import SecondaryBase
from gpufleet.domain.pools import Tier

HOUR_S = 3600


def secondary_base(
    session: Session, rule: SecondaryBase | None, *, sku_id: str, per: int, today_s: int, first_h: int
) -> dict[str, Any] | None:
    """The secondary base of ``sku_id`` at the start of today (``today_s``), or None when the loop holds none
    (``rule`` None) or the SKU has no secondary pool with a quota or no on-demand pool. ``first_h``: the first
    hour of the SKU's measured history (fewer hours than the rule's window: it holds nothing yet)."""
    if rule is None:
        return None
    pools = session.execute(
        select(PoolRow.id, PoolRow.tier, PoolRow.price_uusd_per_gpu_h, PoolRow.quota_gpus).where(
            PoolRow.sku_id == sku_id, PoolRow.tier.in_((Tier.ON_DEMAND.value, Tier.SECONDARY.value))
        )
    ).all()
    secondary = sorted(
        (p for p in pools if p.tier == Tier.SECONDARY.value and p.quota_gpus), key=lambda p: (p[2], p[0])
    )
    on_demand = [p[2] for p in pools if p.tier == Tier.ON_DEMAND.value]
    if not secondary or not on_demand:
        return None
    pool = secondary[0]
    today_h = today_s // HOUR_S
    since_h = max(first_h, today_h - rule.window_h)
    hour = UtilizationRow.bucket_start_s // HOUR_S
    rows = session.execute(
        select(hour, func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s))
        .where(
            UtilizationRow.sku_id == sku_id,
            UtilizationRow.pool_id.in_([p.id for p in pools]),
            UtilizationRow.bucket_start_s >= since_h * HOUR_S,
            UtilizationRow.bucket_start_s < today_s,
        )
        .group_by(hour)
    ).all()
    in_use = np.zeros(max(0, today_h - since_h))
    for h, gpu_s in rows:
        in_use[int(h) - since_h] = float(gpu_s) / HOUR_S
    d = rule.decide(
        in_use.tolist(),
        per,
        secondary_usd=pool.price_uusd_per_gpu_h / 1e6,
        on_demand_usd=min(on_demand) / 1e6,
        max_nodes=int(pool.quota_gpus or 0) // per if per > 0 else 0,
    )
    return {"pool": pool.id, "nodes": d.nodes, "gpus": d.nodes * per, "hours_read": int(in_use.size),
            "reason": d.reason}  # fmt: skip
