"""Placement with graceful degradation over stored pools, decided by the shared
:func:`gpufleet.place.degrade.recommend` (the same code the simulator's placement uses).

This module turns stored rows into the decision's :class:`~gpufleet.place.degrade.PoolState`:

- capacity of a pool: GPUs of active reservations in it (+ its quota, if any) for the reserved tier, its
  quota for the others (no quota = unbounded); in use = the pool's ``allocated_gpus``;
  free = capacity - in use; utilization = in use / capacity (0 for an unbounded pool).
- ``stockout`` and ``queue_wait_s`` come from ``pool_signals`` (``PUT /v1/placement/signals``: what a
  provider adapter or an operator reports); a pool without a row has no stockout and no wait estimate.
- ``low`` priority is opportunistic: on-demand and secondary pools are withheld (trigger ``low_priority``).
- preemption candidates are the running work the caller lists (the service does not yet track which pool
  each running workload sits in).

The answer keeps the original shape ``{region, pool, tier, reason, fallback, skipped, ...}``: ``fallback`` is
the decision's ordered chain after the chosen pool (each link with its trigger, ending with the queue), and
adds ``action`` (place | degrade | preempt | queue), ``gpus``, ``sku``, ``degrade``, ``victims`` and
``expected_start_s``. An exhausted pool is never an error: it is a skipped link with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, bindparam, func, select

from gpufleet.adapters.sql.models import PoolRow, PoolSignalRow, RegionRow, ReservationRow, SkuRow
from gpufleet.cost.budgets import AdmissionAction
from gpufleet.domain.allocations import FallbackStep
from gpufleet.domain.errors import NotFoundError, ValidationError
from gpufleet.domain.pools import TIER_ORDER, CapacityPool, Tier
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.domain.workloads import DegradeOption, Priority, ServingScaling, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, RunningWork, recommend
from gpufleet.place.degrade import PoolHeadroom as PoolState
from gpufleet.service.auth import Actor, Role
from gpufleet.service.budgets import BudgetService, PricedOption
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

_OPPORTUNISTIC_SKIP = (Tier.ON_DEMAND, Tier.SECONDARY)


@dataclass(frozen=True, slots=True)
class ChainPlacementRequest:
    """``gpus`` per replica (or per gang member) times ``replicas``; degrade options lower either or the SKU."""

    job_class: WorkloadKind
    priority: Priority
    sku_id: str
    gpus: int
    regions: Sequence[str] = ()
    checkpointable: bool = False
    replicas: int = 1
    deadline_s: int | None = None
    expected_run_s: int = 0
    degrade_options: tuple[DegradeOption, ...] = ()
    running: tuple[RunningWork, ...] = ()
    workload_id: str = "-"
    team: str | None = None  # whose budget pays (app_team tokens: their own team by default)
    admit: bool = False  # book the placement against the budget (an admission), not just recommend


def _step(step: FallbackStep, region_of: dict[str, str]) -> dict[str, Any]:
    return {
        "pool": step.pool_id,
        "region": None if step.pool_id is None else region_of.get(step.pool_id),
        "tier": None if step.tier is None else step.tier.value,
        "trigger": step.trigger,
    }


def decide(req: ChainPlacementRequest, states: Sequence[PoolState], *, now_s: int) -> dict[str, Any]:
    """Withhold pools a ``low`` priority may not buy, then run the shared degrade decision."""
    region_of = {st.pool.id: st.pool.region_id for st in states}
    withheld: list[dict[str, Any]] = []
    eligible: list[PoolState] = []
    for st in states:
        if req.priority is Priority.LOW and st.pool.tier in _OPPORTUNISTIC_SKIP:
            withheld.append(_step(FallbackStep(st.pool.id, st.pool.tier, "low_priority"), region_of))
        else:
            eligible.append(st)
    training = req.job_class is WorkloadKind.TRAINING
    workload = Workload(
        id=req.workload_id,
        name=req.workload_id,
        kind=req.job_class,
        team_id="-",
        tenant_id="-",
        priority=req.priority,
        acceptable_skus=(req.sku_id,),
        gpus_per_replica=req.gpus,
        gang_size=req.replicas if training else 1,
        checkpoint_interval_s=3600 if training and req.checkpointable else None,
        scaling=None if training else ServingScaling(req.replicas, req.replicas, 1.0),
        deadline_s=req.deadline_s,
        degrade_options=req.degrade_options,
    )
    d = recommend(
        DegradeRequest(
            workload=workload,
            now_s=now_s,
            pools=tuple(eligible),
            expected_run_s=req.expected_run_s,
            running=req.running,
        )
    )
    price = next((st.pool.price_usd_per_gpu_h for st in states if st.pool.id == d.pool_id), None)
    opt = d.degrade
    return {
        "region": d.region_id,
        "pool": d.pool_id,
        "tier": d.tier,
        "price_usd_per_gpu_h": price,
        "reason": d.reason,
        "action": d.action,
        "sku": d.sku_id,
        "gpus": d.gpus,
        "fallback": [_step(s, region_of) for s in d.chain],
        "skipped": withheld + [_step(s, region_of) for s in d.skipped],
        "degrade": None
        if opt is None
        else {"gpus": opt.gpus_per_replica, "sku": opt.sku_id, "min_replicas": opt.min_replicas},
        "victims": list(d.victims),
        "expected_start_s": d.expected_start_s,
    }


class ChainPlacementService:
    def __init__(self, engine: Engine, clock: Clock, budgets: BudgetService | None = None) -> None:
        self._budgets = budgets
        # single-statement reads need no transaction: autocommit saves the BEGIN/ROLLBACK round trips
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._raw = engine
        self._clock = clock
        active = (
            select(ReservationRow.pool_id, func.sum(ReservationRow.units).label("units"))
            .where(
                ReservationRow.status == ReservationStatus.ACTIVE.value,
                ReservationRow.sku_id.in_(bindparam("skus", expanding=True)),
            )
            .group_by(ReservationRow.pool_id)
            .subquery()
        )
        base = (
            select(
                PoolRow.id,
                PoolRow.region_id,
                PoolRow.sku_id,
                PoolRow.tier,
                PoolRow.price_uusd_per_gpu_h,
                PoolRow.quota_gpus,
                PoolRow.allocated_gpus,
                active.c.units,
                PoolRow.provider_id,
                PoolRow.preemption_rate_per_h,
                PoolSignalRow.stockout,
                PoolSignalRow.queue_wait_s,
            )
            .outerjoin(active, active.c.pool_id == PoolRow.id)
            .outerjoin(PoolSignalRow, PoolSignalRow.pool_id == PoolRow.id)
            .where(PoolRow.sku_id.in_(bindparam("skus", expanding=True)))
        )
        self._all_regions = base
        self._some_regions = base.where(PoolRow.region_id.in_(bindparam("regions", expanding=True)))
        self._sku_exists = select(SkuRow.id).where(SkuRow.id == bindparam("sku"))
        self._regions_exist = select(RegionRow.id).where(RegionRow.id.in_(bindparam("regions", expanding=True)))

    def recommend(self, actor: Actor, req: ChainPlacementRequest) -> dict[str, Any]:
        if req.gpus <= 0:
            raise ValidationError("gpus", "must be > 0")
        skus = sorted({req.sku_id} | {o.sku_id for o in req.degrade_options if o.sku_id is not None})
        params: dict[str, Any] = {"skus": skus}
        stmt = self._all_regions
        if req.regions:
            stmt = self._some_regions
            params["regions"] = list(req.regions)
        with self._engine.connect() as conn:  # a plain read: one round trip, no ORM session on the hot path
            rows = conn.execute(stmt, params).all()
            if (
                not any(r[2] == req.sku_id for r in rows)
                and conn.execute(self._sku_exists, {"sku": req.sku_id}).first() is None
            ):
                raise ValidationError("sku", f"unknown SKU {req.sku_id!r}")
            have = {row[1] for row in rows}
            unseen = [r for r in req.regions if r not in have]
            if unseen:  # a region without pools for these SKUs: a typo is an error, a real region just has none
                known = set(conn.execute(self._regions_exist, {"regions": unseen}).scalars())
                for i, region_id in enumerate(req.regions):
                    if region_id not in known and region_id in unseen:
                        raise ValidationError(f"regions[{i}]", f"unknown region {region_id!r}")
        states = []
        price_uusd: dict[str, int] = {}
        for (
            pool_id,
            region_id,
            sku_id,
            tier_name,
            price,
            quota,
            allocated,
            committed,
            provider_id,
            preempt,
            stockout,
            wait_s,
        ) in rows:
            tier = Tier(tier_name)
            price_uusd[pool_id] = int(price)
            capacity: int | None = int(committed or 0) + (quota or 0) if tier is Tier.RESERVED else quota
            pool = CapacityPool(
                pool_id,
                provider_id,
                region_id,
                sku_id,
                tier,
                Decimal(price) / 1_000_000,
                preemption_rate_per_h=preempt,
            )
            free = math.inf if capacity is None else float(capacity - allocated)
            util = 0.0 if not capacity else min(1.0, allocated / capacity)
            states.append(PoolState(pool, free, util, stockout=bool(stockout), queue_wait_s=wait_s))
        now_s = self._clock.now_s()
        decision = decide(req, states, now_s=now_s)
        team = req.team if req.team is not None else (actor.team_id if actor.role is Role.APP_TEAM else None)
        if req.admit:
            actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.APP_TEAM)  # a viewer books nothing
        if team is not None and self._budgets is not None:
            decision = self._admit(actor, team, req, decision, states, price_uusd, now_s)
        else:
            decision["budget"] = None
        decision["tiers_considered"] = [t.value for t in TIER_ORDER]
        return decision

    def _admit(
        self,
        actor: Actor,
        team: str,
        req: ChainPlacementRequest,
        decision: dict[str, Any],
        states: Sequence[PoolState],
        price_uusd: dict[str, int],
        now_s: int,
    ) -> dict[str, Any]:
        """Budget admission of the placement (``service.budgets``): admit, degrade to a declared option that is
        placed and fits the budget, or queue until the window resets."""
        assert self._budgets is not None

        def priced(name: str, d: dict[str, Any]) -> PricedOption:
            pool = d["pool"] if d["action"] != "queue" else None
            return PricedOption(name, 0 if pool is None else price_uusd.get(pool, 0), int(d["gpus"]), pool)

        alternatives: dict[str, tuple[dict[str, Any], DegradeOption]] = {}
        for i, o in enumerate(req.degrade_options):
            sub = replace(
                req,
                sku_id=o.sku_id or req.sku_id,
                gpus=o.gpus_per_replica or req.gpus,
                replicas=o.min_replicas or req.replicas,
                degrade_options=(),
                running=(),
            )
            d = decide(sub, states, now_s=now_s)
            if d["action"] == "place":
                alternatives[f"degrade_options[{i}]"] = (d, o)
        outcome = self._budgets.admit_placement(
            actor,
            team,
            preferred=priced("requested", decision),
            degrade=[priced(name, d) for name, (d, _) in alternatives.items()],
            expected_run_s=req.expected_run_s,
            context={"pool": decision["pool"], "gpus": decision["gpus"], "sku": decision["sku"],
                     "placement_action": decision["action"], "workload_id": req.workload_id},
            named=req.team is not None,
            book=req.admit,
        )  # fmt: skip
        if outcome is None:
            decision["budget"] = None
            return decision
        if outcome.action is AdmissionAction.DEGRADE and outcome.option in alternatives:
            d, o = alternatives[outcome.option]
            decision = {
                **d,
                "action": "degrade",
                "reason": "over_budget_degraded",
                "degrade": {"gpus": o.gpus_per_replica, "sku": o.sku_id, "min_replicas": o.min_replicas},
            }
        elif outcome.action is AdmissionAction.QUEUE:
            decision = {
                **decision,
                "region": None,
                "pool": None,
                "tier": None,
                "price_usd_per_gpu_h": None,
                "action": "queue",
                "reason": "over_budget_queued",
                "fallback": [{"pool": None, "region": None, "tier": None, "trigger": "over_budget_queued"}],
                "degrade": None,
                "victims": [],
                "expected_start_s": outcome.body["retry_at_s"],
            }
        decision["budget"] = outcome.body
        return decision

    def set_signal(self, actor: Actor, *, pool_id: str, stockout: bool, queue_wait_s: int | None) -> dict[str, Any]:
        """Record a pool's stockout signal and expected queue wait (replaces the previous one; audited)."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        now_s = self._clock.now_s()
        with UnitOfWork(self._raw, write=True) as uow:
            if uow.session.get(PoolRow, pool_id) is None:
                raise NotFoundError("pool", pool_id)
            row = uow.session.get(PoolSignalRow, pool_id)
            if row is None:
                row = PoolSignalRow(pool_id=pool_id, stockout=stockout, queue_wait_s=queue_wait_s, updated_at_s=now_s)
                uow.session.add(row)
            else:
                row.stockout, row.queue_wait_s, row.updated_at_s = stockout, queue_wait_s, now_s
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="pool.signal_set",
                entity="pool",
                entity_id=pool_id,
                detail={"stockout": stockout, "queue_wait_s": queue_wait_s},
            )
            uow.commit()
        return {"pool": pool_id, "stockout": stockout, "queue_wait_s": queue_wait_s, "updated_at_s": now_s}
