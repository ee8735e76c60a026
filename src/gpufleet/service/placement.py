"""Placement recommendation over stored pools: walk the tiers reserved -> on_demand -> spot -> secondary and
queue when nothing has headroom.

A baseline until the placement issue's policy is wired in; the response shape stays. Rules (reason codes):

- headroom of a pool = capacity - ``allocated_gpus``; capacity is the GPUs of active reservations in the pool
  (+ its quota, if any) for the reserved tier, the quota for the others (no quota = unbounded).
  A pool without headroom for the request is skipped with ``no_headroom``.
- spot carries only checkpointable training (``not_checkpointable``, ``serving_not_preemptible``).
- ``low`` priority is opportunistic: it never buys on-demand or secondary capacity (``low_priority``).
- within a tier the cheapest pool wins, then the order of ``regions`` in the request, then pool id.

The decision is data: the chosen pool (or the queue), the reason, the pools skipped and why, and the ordered
fallback chain to try next if the chosen pool fails at launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, select

from gpufleet.adapters.sql.models import PoolRow, ReservationRow, SkuRow
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import uusd_to_usd
from gpufleet.domain.pools import TIER_ORDER, TIER_RANK, Tier
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.domain.workloads import Priority, WorkloadKind
from gpufleet.service.auth import Actor


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    job_class: WorkloadKind
    priority: Priority
    sku_id: str
    gpus: int
    regions: Sequence[str] = ()
    checkpointable: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    pool_id: str
    region_id: str
    tier: Tier
    price_uusd_per_gpu_h: int
    headroom_gpus: int | None  # None = unbounded


def _skip_reason(req: PlacementRequest, c: Candidate) -> str | None:
    if c.tier is Tier.SPOT:
        if req.job_class is WorkloadKind.SERVING:
            return "serving_not_preemptible"
        if not req.checkpointable:
            return "not_checkpointable"
    if req.priority is Priority.LOW and c.tier in (Tier.ON_DEMAND, Tier.SECONDARY):
        return "low_priority"
    if c.headroom_gpus is not None and c.headroom_gpus < req.gpus:
        return "no_headroom"
    return None


def decide(req: PlacementRequest, candidates: Sequence[Candidate]) -> dict[str, Any]:
    """Pure decision over candidates; see the module docstring for the rules."""
    region_rank = {r: i for i, r in enumerate(req.regions)}
    ordered = sorted(
        candidates,
        key=lambda c: (TIER_RANK[c.tier], c.price_uusd_per_gpu_h, region_rank.get(c.region_id, 0), c.pool_id),
    )
    usable: list[Candidate] = []
    skipped: list[dict[str, Any]] = []
    for c in ordered:
        why = _skip_reason(req, c)
        if why is None:
            usable.append(c)
        else:
            skipped.append({"pool": c.pool_id, "region": c.region_id, "tier": c.tier.value, "trigger": why})
    fallback = [
        {"pool": c.pool_id, "region": c.region_id, "tier": c.tier.value, "trigger": "launch_failed"} for c in usable[1:]
    ] + [{"pool": None, "region": None, "tier": None, "trigger": "all_pools_failed"}]
    if not usable:
        return {
            "region": None,
            "pool": None,
            "tier": None,
            "price_usd_per_gpu_h": None,
            "reason": "queued_no_headroom",
            "fallback": [],
            "skipped": skipped,
        }
    best = usable[0]
    return {
        "region": best.region_id,
        "pool": best.pool_id,
        "tier": best.tier.value,
        "price_usd_per_gpu_h": uusd_to_usd(best.price_uusd_per_gpu_h),
        "reason": f"{best.tier.value}_headroom" if best.headroom_gpus is not None else f"{best.tier.value}_unbounded",
        "fallback": fallback,
        "skipped": skipped,
    }


class PlacementService:
    def __init__(self, engine: Engine) -> None:
        # single-statement reads need no transaction: autocommit saves the BEGIN/ROLLBACK round trips
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")

    def recommend(self, actor: Actor, req: PlacementRequest) -> dict[str, Any]:
        if req.gpus <= 0:
            raise ValidationError("gpus", "must be > 0")
        active = (
            select(ReservationRow.pool_id, func.sum(ReservationRow.units).label("units"))
            .where(ReservationRow.status == ReservationStatus.ACTIVE.value, ReservationRow.sku_id == req.sku_id)
            .group_by(ReservationRow.pool_id)
            .subquery()
        )
        stmt = (
            select(
                PoolRow.id,
                PoolRow.region_id,
                PoolRow.tier,
                PoolRow.price_uusd_per_gpu_h,
                PoolRow.quota_gpus,
                PoolRow.allocated_gpus,
                active.c.units,
            )
            .outerjoin(active, active.c.pool_id == PoolRow.id)
            .where(PoolRow.sku_id == req.sku_id)
        )
        if req.regions:
            stmt = stmt.where(PoolRow.region_id.in_(list(req.regions)))
        with self._engine.connect() as conn:  # a plain read: one round trip, no ORM session on the hot path
            rows = conn.execute(stmt).all()
            if not rows and conn.execute(select(SkuRow.id).where(SkuRow.id == req.sku_id)).first() is None:
                raise ValidationError("sku", f"unknown SKU {req.sku_id!r}")
        candidates = []
        for pool_id, region_id, tier_name, price, quota, allocated, committed in rows:
            tier = Tier(tier_name)
            capacity: int | None = int(committed or 0) + (quota or 0) if tier is Tier.RESERVED else quota
            headroom = None if capacity is None else capacity - allocated
            candidates.append(Candidate(pool_id, region_id, tier, price, headroom))
        decision = decide(req, candidates)
        decision["tiers_considered"] = [t.value for t in TIER_ORDER]
        return decision
