"""The loop's commitments over stored data, decided through control/ (the quota outlook:
:mod:`gpufleet.service.quota_outlook`).

**Commitments** (:meth:`ProcurementService.commit`: ``POST /v1/plans:propose`` and the reconciler's pass, one
rule): the loop's own procurer (``ControlLoop.gpufleet(...).procurer``, :meth:`ProcurementService.loop`, tier
limits from the stored spot and secondary pools' quotas) asked through ``ports.Procurer.propose`` on the context
the simulator builds (:meth:`ProcurementService.context`: hourly demand of the last 28 days, the reserved pool,
the loop's forecast, the units held or on order at lead time); its proposals become pending reservations through
the reservation use case (the approval rules apply unchanged), each with a deterministic Idempotency-Key.

**Planned runs** (the calendar of :mod:`gpufleet.service.planned_runs`): the context of a SKU-region carries the
runs registered for that SKU in that region, not cancelled and not yet started, as ``ports.PlannedRunRegistration``
(the simulator's desk passes its scenario's calendar the same way), so the procurer's ``planned_run_reserve``
decision (``control/planned_runs.py``) reserves ahead of them. A SKU with runs registered and no utilization in the
lookback (a SKU not used yet) is planned from 28 days of zeros, as the simulator sees a SKU nobody runs on. The
context's ``now_s`` is the start of today, so a run registered later today counts as registered at that instant
(every pass of the day sees the same calendar).
The tier limits the loop is assembled with include the on-demand quota (:meth:`ProcurementService.tier_limits`),
which only that decision reads. Each reservation a pass creates gets an audit event
``reservation.proposed_by_loop`` with the proposal's reason and the planned runs it was bought ahead of, written in
the transaction that creates it (a process killed between the two left the order without its reason for good: the
next pass counts it as held and proposes nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Engine, bindparam, select

from gpufleet.adapters.sql.models import PoolRow, RegionRow, ReservationRow, SkuRow, UtilizationRow, WorkloadRow
from gpufleet.control.loop import ControlLoop
from gpufleet.control.planned_runs import REASON as PLANNED_RUN_REASON
from gpufleet.control.planned_runs import due_runs
from gpufleet.control.procurement import ForecastLedProcurer, TierLimits
from gpufleet.control.proposing import (
    HeldCommitment,
    PlanRegion,
    commitment_orders,
    procurement_context,
    tier_limits,
)
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.reservations import ReservationStatus, term_seconds
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.ports import PlannedRunRegistration, ProcurementContext
from gpufleet.service.auth import Actor, Role
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import Clock
from gpufleet.service.late_hours import fill_late_hours, hourly_gpus, late_hours
from gpufleet.service.plan_regions import PlanMap, plan_view, read_plan_map, scoped
from gpufleet.service.planned_runs import RESERVED_AHEAD, active_runs, public_status, registration
from gpufleet.service.reservation_rows import ReservationView
from gpufleet.service.reservations import ReservationService
from gpufleet.service.secondary_base import secondary_base, secondary_market
from gpufleet.service.uow import UnitOfWork
from gpufleet.service.utilization_reads import gpu_seconds_statement, per_period, watermarks_statement

DAY_S = 86400
HOUR_S = 3600
LOOKBACK_DAYS = 28
HELD_STATUSES = tuple(
    s.value
    for s in (ReservationStatus.PENDING_APPROVAL, ReservationStatus.APPROVED, ReservationStatus.BLOCKED,
              ReservationStatus.SUBMITTED, ReservationStatus.ACTIVE)
)  # fmt: skip


class ProcurementService:
    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        capacity: CapacityService,
        reservations: ReservationService,
        *,
        ingest_grace_h: int = 3,
    ) -> None:
        self._grace_h = ingest_grace_h
        self._engine = engine
        self._clock = clock
        self._capacity = capacity
        self._reservations = reservations
        self._hourly = gpu_seconds_statement(HOUR_S)
        self._watermarks = watermarks_statement()  # each source's last ingested instant (service/late_hours.py)
        # the same hours on some pools only (the secondary base's launched use)
        self._pools_hourly = self._hourly.where(UtilizationRow.pool_id.in_(bindparam("pools", expanding=True)))
        # the same hours, only the records of workloads registered as serving (the stock-out cover's observation)
        self._serving_hourly = self._hourly.join(WorkloadRow, WorkloadRow.id == UtilizationRow.workload_id).where(
            WorkloadRow.kind == WorkloadKind.SERVING.value
        )

    def _held(self, sku_id: str, region_id: str, now_s: int) -> list[HeldCommitment]:
        """Reservations of the SKU in the region held or on their way (pending approval, approved, submitted,
        active) that have not ended: (id, units, start_s, end_s, status), oldest first."""
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                select(
                    ReservationRow.id,
                    ReservationRow.units,
                    ReservationRow.start_s,
                    ReservationRow.term_months,
                    ReservationRow.status,
                )
                .where(
                    ReservationRow.sku_id == sku_id,
                    ReservationRow.region_id == region_id,
                    ReservationRow.status.in_(HELD_STATUSES),
                )
                .order_by(ReservationRow.start_s, ReservationRow.id)
            ).all()
        out = [
            HeldCommitment(rid, units, start, start + term_seconds(term), status)
            for rid, units, start, term, status in rows
        ]
        return [h for h in out if h.end_s > now_s]

    def _history(
        self,
        sku_id: str,
        region_id: str,
        since_s: int,
        today_s: int,
        plan: PlanRegion | None,
        *,
        none_is_zero: bool = False,
    ) -> npt.NDArray[np.float64]:
        """The SKU's hourly GPUs in use (the records ``plan`` reads; None: all of them), from its first record
        since ``since_s`` up to ``today_s``, oldest first; hours without a record are 0. Without any record: every
        hour since ``since_s`` at 0 with ``none_is_zero`` (a SKU not used yet, as the simulator sees a SKU nobody
        runs on), else an error."""
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
            if uow.session.get(RegionRow, region_id) is None:
                raise ValidationError("region", f"unknown region {region_id!r}")
            rows = per_period(
                uow.session.execute(
                    scoped(self._hourly, plan), {"sku": sku_id, "since_s": since_s, "until_s": today_s}
                ).all(),
                HOUR_S,
                today_s,
            )
        if not rows and none_is_zero:
            return np.zeros((today_s - since_s) // HOUR_S)
        if not rows and plan is not None and plan.own_only:
            raise ValidationError("region", f"no utilization records for {sku_id!r} in {region_id!r} in the last "
                                            f"{LOOKBACK_DAYS} days")  # fmt: skip
        if not rows:
            raise ValidationError("sku", f"no utilization records for {sku_id!r} in the last {LOOKBACK_DAYS} days")
        return hourly_gpus(rows, min(int(h) for h, _ in rows), today_s)

    def late_hours(self, sku_id: str, today_s: int, plan: PlanRegion | None = None) -> int:
        """How many of the SKU's last hours before ``today_s`` are not yet fully ingested (service/late_hours.py:
        before the earliest watermark of the sources that reported for it in the day before, at most the grace),
        over the records ``plan`` reads (None: all of them; a region's late telemetry fills only its own plan)."""
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                scoped(self._watermarks, plan), {"sku": sku_id, "since_s": today_s - DAY_S, "until_s": today_s}
            ).all()
        return late_hours((int(w) for _, w in rows), today_s, self._grace_h)

    def _serving_history(
        self, sku_id: str, first_h: int, today_s: int, plan: PlanRegion | None
    ) -> npt.NDArray[np.float64] | None:
        """The SKU's hourly GPUs in use by workloads registered as serving (the records ``plan`` reads), over the
        hours of its demand history (from hour ``first_h`` up to ``today_s``; hours without a record are 0), or None
        when no serving workload has a record there (the simulator's desk: None when no fleet serves on the SKU)."""
        with UnitOfWork(self._engine, write=False) as uow:
            rows = per_period(
                uow.session.execute(
                    scoped(self._serving_hourly, plan),
                    {"sku": sku_id, "since_s": first_h * HOUR_S, "until_s": today_s},
                ).all(),
                HOUR_S,
                today_s,
            )
        return hourly_gpus(rows, first_h, today_s) if rows else None

    def _secondary_base(self, loop: ControlLoop, ctx: ProcurementContext, late: int) -> dict[str, Any] | None:
        """The loop's secondary base for the context's SKU (service/secondary_base.py) on the GPUs in use per hour
        on its on-demand and secondary pools over the rule's window (from the SKU's first measured hour at most);
        None when the loop holds none or the SKU has no secondary pool with a quota. Reported on the SKU's main
        plan region only (:meth:`commit`), as it reads the SKU's pools in every region."""
        rule = loop.secondary_base
        if rule is None:
            return None
        with UnitOfWork(self._engine, write=False) as uow:
            market = secondary_market(uow.session, ctx.sku_id)
            if market is None:
                return None
            today_h = ctx.now_s // HOUR_S
            since_h = max(today_h - ctx.demand_history_gpus.size, today_h - rule.window_h)
            rows = per_period(uow.session.execute(self._pools_hourly, {"sku": ctx.sku_id,
                                                                       "pools": list(market.launched_pools),
                                                                       "since_s": since_h * HOUR_S,
                                                                       "until_s": ctx.now_s}).all(),
                              HOUR_S, ctx.now_s)  # fmt: skip
        used = fill_late_hours(hourly_gpus(rows, since_h, ctx.now_s), late)  # the context's late hours
        return secondary_base(rule, market, used, ctx.gpus_per_node)

    def tier_limits(self, skus: Sequence[str], plans: Mapping[str, PlanRegion] | None = None) -> dict[str, TierLimits]:
        """For each SKU, what its spot and secondary-provider pools can absorb, from the stored pools' quotas
        (:func:`gpufleet.control.proposing.tier_limits`: a pool without a quota counts for nothing; a secondary pool
        with a preemption rate counts as spot), and its
        on-demand quota (:func:`on_demand_quota`). The limits the loop is assembled with. ``plans``: a SKU planned
        in several regions counts, in each plan, the pools of the regions that plan reads (quotas are regional:
        each is counted by one plan); without it, every pool of the SKU."""
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                select(
                    PoolRow.sku_id, PoolRow.region_id, PoolRow.tier, PoolRow.quota_gpus, PoolRow.preemption_rate_per_h
                ).where(PoolRow.sku_id.in_(sorted(skus)))
            ).all()
        by_sku: dict[str, list[tuple[str, int | None]]] = {sku: [] for sku in skus}
        for sku, region, tier, quota, preempt in rows:
            plan = None if plans is None else plans.get(sku)
            if plan is None or plan.reads(region):
                # a spot-like secondary pool (preemptible) takes checkpointed training only, as spot: never counted
                # as capacity serving leans on (placement never gives serving preemptible nodes)
                spot_like = tier == Tier.SECONDARY.value and (preempt or 0.0) > 0.0
                by_sku[sku].append((Tier.SPOT.value if spot_like else tier, quota))
        return {
            sku: dataclasses.replace(tier_limits(pools), on_demand_quota_gpus=on_demand_quota(pools))
            for sku, pools in by_sku.items()
        }

    def loop(self, skus: Sequence[str], plans: Mapping[str, PlanRegion] | None = None) -> ControlLoop:
        """The control loop the service runs, from the one place it is assembled (``ControlLoop.gpufleet``),
        with the tier limits of the stored pools of ``skus`` (of the regions each SKU's plan reads, with
        ``plans``). Its procurer is the simulator's; its randomness (approvers, scheduler tie-breaks) is not used
        here."""
        return ControlLoop.gpufleet(0, tier_limits=self.tier_limits(skus, plans))

    def plan_map(self, today_s: int, skus: Sequence[str] | None = None) -> PlanMap:
        """Where each SKU (or only ``skus``) is planned on the day starting ``today_s``, and which use each plan
        reads (service/plan_regions.py: one region per region of use with a reserved pool, the main one reading
        the rest)."""
        with UnitOfWork(self._engine, write=False) as uow:
            return read_plan_map(uow.session, today_s, LOOKBACK_DAYS, HELD_STATUSES, skus)

    def plan_regions_view(self, actor: Actor, sku_id: str | None = None) -> dict[str, Any]:
        """Where the pass of today plans each SKU (or only ``sku_id``), and on which use (:func:`plan_view`):
        admins and viewers; an app_team token reads no fleet plan."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        today_s = self._clock.now_s() // DAY_S * DAY_S
        if sku_id is not None:
            with UnitOfWork(self._engine, write=False) as uow:
                if uow.session.get(SkuRow, sku_id) is None:
                    raise ValidationError("sku", f"unknown SKU {sku_id!r}")
        m = self.plan_map(today_s, None if sku_id is None else [sku_id])
        return {"now_s": today_s, "lookback_days": LOOKBACK_DAYS, "skus": plan_view(m)}

    def plan_region(self, sku_id: str, region_id: str, today_s: int) -> PlanRegion | None:
        """The SKU-region's plan in :meth:`plan_map`; None when the SKU has no plan anywhere or the region has no
        reserved pool of it (the context's own errors then name what is missing). A region with a reserved pool
        that is not planned (no use of the SKU there and no run registered, while it is planned elsewhere) is a
        :class:`ValidationError` naming ``region``: planning it would buy again what the plans elsewhere buy."""
        m = self.plan_map(today_s, [sku_id])
        plans = m.regions.get(sku_id, ())
        for p in plans:
            if p.region == region_id:
                return p
        if not plans or region_id not in m.reserved.get(sku_id, []):
            return None
        raise ValidationError(
            "region",
            f"{sku_id!r} is planned in {', '.join(p.region for p in plans)}: no use of it in {region_id!r} in the "
            f"last {LOOKBACK_DAYS} days and no planned run there",
        )

    def planned_runs(self, sku_id: str, region_id: str, today_s: int) -> list[tuple[str, PlannedRunRegistration]]:
        """The SKU-region's registered runs the procurer reads at a pass of the day starting ``today_s``: not
        cancelled and not started, as ``(id, ports.PlannedRunRegistration)``. A run registered after ``today_s``
        counts as registered at ``today_s`` (the context's now: the pass happens after the registration)."""
        with UnitOfWork(self._engine, write=False) as uow:
            rows = active_runs(uow, sku_id, region_id, today_s)
        return [
            (r.id, dataclasses.replace(registration(r), registered_s=min(int(r.registered_s), today_s))) for r in rows
        ]

    def context(
        self,
        sku_id: str,
        region_id: str,
        loop: ControlLoop,
        *,
        forecast_h: int,
        planned: Sequence[tuple[str, PlannedRunRegistration]] | None = None,
        late: int | None = None,
        plan: PlanRegion | None = None,
    ) -> tuple[ProcurementContext, list[HeldCommitment]]:
        """The loop's procurement context for the SKU planned in the region, from the store, and the
        reservations held or on their way that it counts. ``now_s`` is the start of today (the end of the
        measured history), so every pass of the same day decides, and keys, the same orders. ``planned``: the
        registered runs to pass (default: :meth:`planned_runs` of the SKU-region); ``late``: the hours still being
        ingested (default: :meth:`late_hours`); ``plan``: which use the SKU-region's plan reads (default:
        :meth:`plan_region`)."""
        now_s = self._clock.now_s()
        today_s = now_s // DAY_S * DAY_S
        if planned is None:
            planned = self.planned_runs(sku_id, region_id, today_s)
        if plan is None:
            plan = self.plan_region(sku_id, region_id, today_s)
        if late is None:  # hours still being ingested take the day before's
            late = self.late_hours(sku_id, today_s, plan)
        # a SKU not used yet is planned from zeros when runs are registered for it (ahead of its first run)
        since_s = today_s - LOOKBACK_DAYS * DAY_S
        hourly = fill_late_hours(
            self._history(sku_id, region_id, since_s, today_s, plan, none_is_zero=bool(planned)), late
        )
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.scalars(
                select(PoolRow)
                .where(PoolRow.sku_id == sku_id, PoolRow.region_id == region_id, PoolRow.tier == Tier.RESERVED.value)
                .order_by(PoolRow.id)
            ).first()
            sku = uow.session.get(SkuRow, sku_id)
            if row is None:
                raise ValidationError("region", f"no reserved pool of {sku_id!r} in {region_id!r}")
            pool = CapacityPool(
                row.id, row.provider_id, row.region_id, row.sku_id, Tier.RESERVED,
                Decimal(row.price_uusd_per_gpu_h) / 1_000_000, term_months=row.term_months,
                lead_time_s=row.lead_time_s, quota_gpus=row.quota_gpus,
            )  # fmt: skip
            per_node = int(sku.gpus_per_node) if sku is not None else 1
        forecast = loop.forecaster.forecast(hourly, HOUR_S, forecast_h) if hourly.size >= 24 else None
        held = self._held(sku_id, region_id, today_s)
        ctx = procurement_context(
            now_s=today_s, sku_id=sku_id, pool=pool, hourly_gpus=hourly, forecast=forecast,
            held=held, gpus_per_node=per_node,
        )  # fmt: skip
        serving = self._serving_history(sku_id, today_s // HOUR_S - hourly.size, today_s, plan)
        if serving is not None:
            serving = fill_late_hours(serving, late)
        return dataclasses.replace(ctx, planned_runs=tuple(reg for _, reg in planned), serving_asks_gpus=serving), held

    def commit(
        self,
        actor: Actor,
        *,
        sku_id: str,
        region_id: str,
        forecast_h: int = 7 * 24,
        plan: PlanRegion | None = None,
    ) -> dict[str, Any]:
        """The loop's procurement stage on the store: the SKU-region's context (:meth:`context`), the loop's
        procurer decides (``ports.Procurer.propose``), and its proposals become pending reservations through the
        reservation use case (the approval rules apply unchanged), each with its deterministic Idempotency-Key.
        What is held or on order at lead time is counted in the context, so it is not bought again. The loop is
        assembled for the SKU-region's plan (:meth:`loop`: the tier limits of the regions it reads).
        ``forecast_h``: the hours the loop's forecaster forecasts for the procurer (the procurement period).
        ``plan``: which use the SKU-region's plan reads (the pass's plan map; None: :meth:`plan_region`)."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        now_s = self._clock.now_s()
        if plan is None:
            plan = self.plan_region(sku_id, region_id, now_s // DAY_S * DAY_S)
        loop = self.loop([sku_id], None if plan is None else {sku_id: plan})
        planned = self.planned_runs(sku_id, region_id, now_s // DAY_S * DAY_S)
        late = self.late_hours(sku_id, now_s // DAY_S * DAY_S, plan)
        ctx, held = self.context(sku_id, region_id, loop, forecast_h=forecast_h, planned=planned, late=late, plan=plan)
        proposals = loop.procurer.propose(ctx)
        base = None if plan is not None and plan.own_only else self._secondary_base(loop, ctx, late)
        rule = loop.procurer.planned if isinstance(loop.procurer, ForecastLedProcurer) else None
        lead_h = ctx.pool.lead_time_s // HOUR_S  # as the procurer reads it
        # a planned-run order is bought ahead of the runs due at this review (those its reason names), not of every
        # run of the calendar (one starting after the term it covers was listed as reserved ahead of)
        due = [] if rule is None else [
            (rid, r) for rid, r in planned
            if due_runs([r], sku_id, ctx.now_s, lead_h * HOUR_S, rule.review_gap_h * HOUR_S)
        ]  # fmt: skip
        created = []
        for order in commitment_orders(proposals, region_id=region_id):
            p, key = order.proposal, order.idempotency_key
            # the order's key is its identity (from the proposal's start); its start moved up to now differs at each
            # pass of the day, so the order proposed earlier today (and since rejected or cancelled) is looked up by
            # its key rather than sent again as a "different proposal" under the same key. Its reason is written in
            # the transaction that creates it, so a crash between the two cannot leave the order without it
            reason = functools.partial(self._record_reason, actor, p.reason, key, due, now_s)
            view = self._reservations.by_client_key(actor, key) or self._reservations.create(
                actor, sku_id=p.sku_id, units=p.units, start_s=max(p.start_s, now_s), term_months=p.term_months,
                regions=[order.region_id], client_key=key, on_created=reason,
            )  # fmt: skip
            created.append(
                {"reservation_id": view.id,
                 "status": public_status(view.status.value),
                 "units": view.units, "units_bought": self._reservations.units_bought(view.sku_id, view.units),
                 "start_s": view.start_s, "term_months": view.term_months, "est_cost_usd": view.est_cost_usd,
                 "approvals_required": view.approvals_required, "idempotency_key": key, "pool": view.pool_id,
                 "tier": Tier.RESERVED.value, "reason": p.reason}
            )  # fmt: skip
        runs = [
            {"id": rid, "name": r.name, "team": r.team, "gpus": r.gpus, "start_s": r.start_s,
             "duration_s": r.duration_s, "probability": r.probability,
             "order_from_s": None if rule is None else rule.order_from_s(r, lead_h)}
            for rid, r in planned
        ]  # fmt: skip
        return {
            "sku": sku_id,
            "region": region_id,
            "procurer": type(loop.procurer).__name__,
            "context": {
                "now_s": ctx.now_s,
                "pool": ctx.pool.id,
                "history_hours": int(ctx.demand_history_gpus.size),
                "late_hours_filled": late,
                "forecast": None if ctx.forecast is None else ctx.forecast.method,
                "committed_gpus_at_lead": ctx.committed_gpus_at_lead,
                "gpus_per_node": ctx.gpus_per_node,
                "planned_runs": len(ctx.planned_runs),
                "serving_history_hours": None if ctx.serving_asks_gpus is None else int(ctx.serving_asks_gpus.size),
                "use_read": _use_read(plan),
            },
            "planned_runs": runs,
            "proposals": [
                {"units": p.units, "start_s": p.start_s, "term_months": p.term_months, "reason": p.reason}
                for p in proposals
            ],
            "held": [
                {"reservation_id": h.id, "units": h.units, "start_s": h.start_s, "end_s": h.end_s, "status": h.status}
                for h in held
            ],
            "created": created,
            "secondary_base": base,
        }

    @staticmethod
    def _record_reason(
        actor: Actor,
        reason: str,
        key: str,
        planned: Sequence[tuple[str, PlannedRunRegistration]],
        now_s: int,
        uow: UnitOfWork,
        view: ReservationView,
    ) -> None:
        """The audit event of a reservation the loop creates, in its creating transaction (``on_created`` of
        :meth:`ReservationService.create`): the proposal's reason (and, for a ``planned_run_reserve`` order,
        ``planned``: the runs it was bought ahead of, those due at this review, each linked to it)."""
        ahead = [rid for rid, _ in planned] if reason.startswith(PLANNED_RUN_REASON) else []
        uow.audit(at_s=now_s, actor=actor.user_id, action="reservation.proposed_by_loop", entity="reservation",
                  entity_id=view.id, detail={"reason": reason, "planned_runs": ahead, "idempotency_key": key})  # fmt: skip
        link = {"reservation_id": view.id, "units": view.units}
        for run_id in ahead:  # each run lists what was bought ahead of it (service/planned_runs.py)
            uow.audit(at_s=now_s, actor=actor.user_id, action=RESERVED_AHEAD, entity="planned_run",
                      entity_id=run_id, detail=link)  # fmt: skip


def _use_read(plan: PlanRegion | None) -> dict[str, Any]:
    """Which utilization records a plan read: ``own_region`` (records naming a pool of the plan's region), or
    every record of the SKU but those of ``excluded_regions``' pools (none excluded: all of its use)."""
    if plan is not None and plan.own_only:
        return {"own_region": True, "excluded_regions": []}
    return {"own_region": False, "excluded_regions": [] if plan is None else list(plan.excluded)}


def on_demand_quota(pools: Sequence[tuple[str, int | None]]) -> float:
    """A SKU's on-demand quota (GPUs) from its pools as ``(tier, quota_gpus)`` (those of the regions its plan reads,
    :meth:`ProcurementService.tier_limits`): the sum over its on-demand pools when each of them states a quota;
    infinite (no known ceiling, as the simulator's pool without ``on_demand_quota_gpus``) when one does not, or
    when none is stored. Only the planned-run decision reads it."""
    quotas = [q for tier, q in pools if tier == Tier.ON_DEMAND.value]
    if not quotas or any(q is None for q in quotas):
        return math.inf
    return float(sum(q for q in quotas if q is not None))
