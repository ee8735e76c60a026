"""Placement recommendation over stored pools, decided by the SAME code the simulator's control loop uses
(:class:`gpufleet.place.fallback.FallbackChain`: tiers reserved -> on_demand -> spot -> secondary -> queue).

This module only turns stored rows into the chain's :class:`~gpufleet.ports.PoolState` and its
:class:`~gpufleet.domain.allocations.Allocation` back into the API's answer:

- capacity of a pool: GPUs of active reservations in it (+ its quota, if any) for the reserved tier, its
  quota for the others (no quota = unbounded); in use = the pool's ``allocated_gpus``.
- ``low`` priority is opportunistic: on-demand and secondary pools are withheld from the chain
  (trigger ``low_priority``), so it lands on reserved headroom or spot, or queues.
- ``skipped`` lists the pools the chain passed over and why; ``fallback`` is where the chain goes next if the
  chosen pool fails at launch (the chain re-run without it, and so on), ending with the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, bindparam, func, select

from gpufleet.adapters.sql.models import PoolRow, ReservationRow, SkuRow
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import TIER_ORDER, CapacityPool, Tier
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.domain.workloads import Priority, WorkloadKind
from gpufleet.place.fallback import FallbackChain
from gpufleet.ports import PlacementRequest as ChainRequest
from gpufleet.ports import PoolState
from gpufleet.service.auth import Actor

_CHAIN = FallbackChain()
_OPPORTUNISTIC_SKIP = (Tier.ON_DEMAND, Tier.SECONDARY)


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    job_class: WorkloadKind
    priority: Priority
    sku_id: str
    gpus: int
    regions: Sequence[str] = ()
    checkpointable: bool = False


def _step(pool_id: str | None, region: str | None, tier: Tier | None, trigger: str) -> dict[str, Any]:
    return {"pool": pool_id, "region": region, "tier": None if tier is None else tier.value, "trigger": trigger}


def decide(req: PlacementRequest, states: Sequence[PoolState]) -> dict[str, Any]:
    """Run the shared fallback chain over the pools; see the module docstring for what is added."""
    region_of = {st.pool.id: st.pool.region_id for st in states}
    skipped: list[dict[str, Any]] = []
    eligible: list[PoolState] = []
    for st in states:
        if req.priority is Priority.LOW and st.pool.tier in _OPPORTUNISTIC_SKIP:
            skipped.append(_step(st.pool.id, st.pool.region_id, st.pool.tier, "low_priority"))
        else:
            eligible.append(st)
    chain_req = ChainRequest(
        workload_id="-",
        sku_id=req.sku_id,
        gpus=req.gpus,
        serving=req.job_class is WorkloadKind.SERVING,
        checkpointable=req.job_class is WorkloadKind.TRAINING and req.checkpointable,
        launchable_tiers_only=False,  # a recommendation may point at reserved headroom
    )
    alloc = _CHAIN.choose(chain_req, eligible)
    skipped += [
        _step(s.pool_id, region_of.get(s.pool_id or ""), s.tier, s.trigger)
        for s in alloc.fallback
        if s.pool_id is not None
    ]
    fallback: list[dict[str, Any]] = []
    remaining = [st for st in eligible if st.pool.id != alloc.pool_id]
    while alloc.pool_id is not None and remaining:
        nxt = _CHAIN.choose(chain_req, remaining)
        if nxt.pool_id is None:
            break
        fallback.append(_step(nxt.pool_id, region_of[nxt.pool_id], nxt.tier, "launch_failed"))
        remaining = [st for st in remaining if st.pool.id != nxt.pool_id]
    fallback.append(_step(None, None, None, "queue"))
    chosen = next((st.pool for st in states if st.pool.id == alloc.pool_id), None)
    return {
        "region": None if chosen is None else chosen.region_id,
        "pool": alloc.pool_id,
        "tier": None if alloc.tier is None else alloc.tier.value,
        "price_usd_per_gpu_h": None if chosen is None else chosen.price_usd_per_gpu_h,
        "reason": alloc.reason,
        "fallback": fallback if chosen is not None else [],
        "skipped": skipped,
    }


class PlacementService:
    def __init__(self, engine: Engine) -> None:
        # single-statement reads need no transaction: autocommit saves the BEGIN/ROLLBACK round trips
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        # built once with bound parameters: constructing the statement cost ~1/3 of the service time
        active = (
            select(ReservationRow.pool_id, func.sum(ReservationRow.units).label("units"))
            .where(ReservationRow.status == ReservationStatus.ACTIVE.value, ReservationRow.sku_id == bindparam("sku"))
            .group_by(ReservationRow.pool_id)
            .subquery()
        )
        base = (
            select(
                PoolRow.id,
                PoolRow.region_id,
                PoolRow.tier,
                PoolRow.price_uusd_per_gpu_h,
                PoolRow.quota_gpus,
                PoolRow.allocated_gpus,
                active.c.units,
                PoolRow.provider_id,
                PoolRow.preemption_rate_per_h,
            )
            .outerjoin(active, active.c.pool_id == PoolRow.id)
            .where(PoolRow.sku_id == bindparam("sku"))
        )
        self._all_regions = base
        self._some_regions = base.where(PoolRow.region_id.in_(bindparam("regions", expanding=True)))
        self._sku_exists = select(SkuRow.id).where(SkuRow.id == bindparam("sku"))

    def recommend(self, actor: Actor, req: PlacementRequest) -> dict[str, Any]:
        if req.gpus <= 0:
            raise ValidationError("gpus", "must be > 0")
        params: dict[str, Any] = {"sku": req.sku_id}
        stmt = self._all_regions
        if req.regions:
            stmt = self._some_regions
            params["regions"] = list(req.regions)
        with self._engine.connect() as conn:  # a plain read: one round trip, no ORM session on the hot path
            rows = conn.execute(stmt, params).all()
            if not rows and conn.execute(self._sku_exists, {"sku": req.sku_id}).first() is None:
                raise ValidationError("sku", f"unknown SKU {req.sku_id!r}")
        states = []
        for pool_id, region_id, tier_name, price, quota, allocated, committed, provider_id, preempt in rows:
            tier = Tier(tier_name)
            capacity: int | None = int(committed or 0) + (quota or 0) if tier is Tier.RESERVED else quota
            pool = CapacityPool(
                pool_id,
                provider_id,
                region_id,
                req.sku_id,
                tier,
                Decimal(price) / 1_000_000,
                preemption_rate_per_h=preempt,
            )
            states.append(PoolState(pool, gpus_in_use=allocated, capacity_gpus=capacity, in_stock=True))
        decision = decide(req, states)
        decision["tiers_considered"] = [t.value for t in TIER_ORDER]
        return decision
