"""The loop's secondary base over stored data: how many secondary-provider nodes of a SKU to hold.

The decision is the simulator's (:class:`gpufleet.control.secondary_base.SecondaryBase`, ``ControlLoop.gpufleet``'s
``secondary_base``, reason ``secondary_base``), asked on what the store measured: the SKU's GPUs in use on its
on-demand and secondary-provider pools per hour (utilization records naming a pool of those tiers; hours without a
record 0) over the rule's window, the cheapest secondary pool with a stored quota and no preemption rate (its room,
in whole nodes; a spot-like one takes checkpointed training only, no base) and the cheapest on-demand price of the
SKU. The simulator launches the nodes it decides; the service has no secondary provider's API to rent nodes
through, so it reports the decision (``POST /v1/plans:propose``, the reconciler's pass) for whoever rents them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import PoolRow
from gpufleet.control.secondary_base import SecondaryBase
from gpufleet.domain.pools import Tier


@dataclass(frozen=True, slots=True)
class SecondaryMarket:
    """What the base is weighed against for one SKU: its cheapest secondary pool with a stored quota and the
    cheapest on-demand price; ``launched_pools``: the SKU's on-demand and secondary pools (whose use it reads)."""

    pool_id: str
    secondary_usd: float
    quota_gpus: int
    on_demand_usd: float
    launched_pools: tuple[str, ...]


def secondary_market(session: Session, sku_id: str) -> SecondaryMarket | None:
    """The SKU's :class:`SecondaryMarket`, or None without a secondary pool with a quota (and no preemption rate)
    or an on-demand pool."""
    pools = session.execute(
        select(
            PoolRow.id, PoolRow.tier, PoolRow.price_uusd_per_gpu_h, PoolRow.quota_gpus, PoolRow.preemption_rate_per_h
        ).where(PoolRow.sku_id == sku_id, PoolRow.tier.in_((Tier.ON_DEMAND.value, Tier.SECONDARY.value)))
    ).all()
    # a spot-like (preemptible) secondary pool is no base: its nodes take checkpointed training only, not the
    # on-demand GPUs (serving's among them) the base stands in for
    secondary = sorted(
        (
            p
            for p in pools
            if p.tier == Tier.SECONDARY.value and p.quota_gpus and not (p.preemption_rate_per_h or 0) > 0
        ),
        key=lambda p: (p.price_uusd_per_gpu_h, p.id),
    )
    on_demand = [p.price_uusd_per_gpu_h for p in pools if p.tier == Tier.ON_DEMAND.value]
    if not secondary or not on_demand:
        return None
    pool = secondary[0]
    return SecondaryMarket(pool.id, pool.price_uusd_per_gpu_h / 1e6, int(pool.quota_gpus or 0), min(on_demand) / 1e6,
                           tuple(p.id for p in pools))  # fmt: skip


def secondary_base(
    rule: SecondaryBase, market: SecondaryMarket, in_use_gpus: npt.NDArray[np.float64], per: int
) -> dict[str, Any]:
    """The loop's decision on the GPUs in use per hour on ``market.launched_pools`` (oldest first, the rule reads
    its last window), as the API reports it."""
    d = rule.decide(
        in_use_gpus.tolist(),
        per,
        secondary_usd=market.secondary_usd,
        on_demand_usd=market.on_demand_usd,
        max_nodes=market.quota_gpus // per if per > 0 else 0,
    )
    return {"pool": market.pool_id, "nodes": d.nodes, "gpus": d.nodes * per, "hours_read": int(in_use_gpus.size),
            "reason": d.reason}  # fmt: skip
