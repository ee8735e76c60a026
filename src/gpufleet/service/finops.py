"""FinOps over the service's stored data: the cost package's books for a window, a workload's cost, rightsizing
changes that are applied and rolled back, and gpufleet's own metrics.

* :meth:`FinOpsService.snapshot` loads workloads, utilization, pools and reservations for the window ending now
  and runs the control loop's one metering (:meth:`gpufleet.control.metering.Meter.window`, the cost package): allocation (idle as a separate line, shared proportional), usage totals, idle
  detection, rightsizing and a seasonal-naive forecast vs actual. Snapshots are memoized for ``cache_s``.
* Rightsizing changes go through ``cost.changes`` (ONE transition table, via ``control.costing.change_spec``): the request records a change with the
  workload's spec before and after (in the change's audit event, append-only), ``apply`` writes the new spec to
  the workload (version + 1), ``rollback`` writes the old one back; both refuse a workload edited in between.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, func, select, update

from gpufleet.adapters.metrics import GpufleetMetrics
from gpufleet.adapters.sql.models import (
    AuditEventRow,
    PoolRow,
    ReservationRow,
    RightsizingChangeRow,
    SkuRow,
    UtilizationRow,
    WorkloadRow,
)
from gpufleet.control.costing import (
    ChangeStatus,
    Recommendation,
    ResourceSpec,
    RightsizingChange,
    change_spec,
    idle_waste,
)
from gpufleet.control.metering import (
    AllocationSpan,
    CostLine,
    FinOpsSnapshot,
    Meter,
    MeterInputs,
    ReservedBlock,
    UtilRec,
    WorkloadInfo,
)
from gpufleet.domain.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.domain.money import units_to_cents
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import StatusChange, term_seconds
from gpufleet.domain.workloads import Priority, ServingScaling, Workload, WorkloadKind
from gpufleet.service.auth import Actor
from gpufleet.service.clock import Clock, IdGenerator
from gpufleet.service.pass_records import deferred_steps
from gpufleet.service.pool_prices import price_history
from gpufleet.service.uow import UnitOfWork
from gpufleet.service.workloads import WRITERS

DAY_S = 86_400
PAID_STATUSES = ("submitted", "active", "expired")  # an order at the provider is paid over its term
MAX_CACHED_WINDOWS = 8  # memoized snapshots at most (each is the fleet's books of one window the callers asked)
ROW_STATUS = {ChangeStatus.PROPOSED: "pending"}  # the API has always said "pending" for a proposed change
__all__ = ["FinOpsService", "FinOpsSnapshot", "change_dict", "recommendation_dict", "usd"]


def _summed_over_sources(rows: Sequence[Any]) -> list[UtilRec]:
    """One record per (workload, team, SKU, bucket start, bucket length, pool) from the stored rows ``(workload,
    team, sku, start, bucket_s, gpus, util, pool, gpu_mem_gb)``: the GPUs of every source added up (two sources are
    two holdings, e.g. the meters of two clusters; re-ingesting one source's bucket replaces its row, the primary key
    being (source, bucket start, workload)), the utilization weighted by the GPUs of the sources that measured it
    (NaN when none did), a replica's GPU memory the largest of the sources' (NaN unless every source measured it:
    the others' replicas may hold more). A group of one row is that row unchanged."""
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for r in rows:
        groups[(r[0], r[1], r[2], int(r[3]), int(r[4]), r[7])].append(r)
    nan = math.nan  # a record whose utilization was not measured
    out: list[UtilRec] = []
    for (wl, team, sku, start, bucket_s, pool), grp in groups.items():
        if len(grp) == 1:
            g = grp[0]
            out.append(UtilRec(wl, team, sku, start, bucket_s, float(g[5]), nan if g[6] is None else float(g[6]), pool,
                               nan if g[8] is None else float(g[8])))  # fmt: skip
            continue
        gpus = sum(float(g[5]) for g in grp)
        measured = [(float(g[5]), float(g[6])) for g in grp if g[6] is not None]
        held = sum(m[0] for m in measured)
        if not measured:
            util = nan
        elif held > 0:
            util = sum(m[0] * m[1] for m in measured) / held
        else:
            util = sum(m[1] for m in measured) / len(measured)
        gmem = nan if any(g[8] is None for g in grp) else max(float(g[8]) for g in grp)
        out.append(UtilRec(wl, team, sku, start, bucket_s, gpus, util, pool, gmem))
    return out


def _status_of(row_status: str) -> ChangeStatus:
    return ChangeStatus.PROPOSED if row_status == "pending" else ChangeStatus(row_status)


def _row_status(s: ChangeStatus) -> str:
    return ROW_STATUS.get(s, s.value)


class FinOpsService:
    def __init__(self, engine: Engine, clock: Clock, ids: IdGenerator, *, cache_s: float = 5.0) -> None:
        self._engine = engine
        self._clock = clock
        self._ids = ids
        self._cache_s = cache_s
        self._cache: dict[int, tuple[float, int, FinOpsSnapshot]] = {}
        self._generation = 0  # bumped by invalidate(): a snapshot built across a write is not memoized
        self._lock = threading.Lock()
        self.metrics = GpufleetMetrics()
        self.meter = Meter()  # the loop's one metering (idle as a separate line, shared proportional)

    # ---- books ------------------------------------------------------------------------------------------------
    def _load(self, t0_s: int, t1_s: int) -> MeterInputs:
        """The stored data the meter reads for [t0_s, t1_s): utilization records (and the day before), every
        registered workload, paid reservations, each SKU's cheapest on-demand pool, every pool's tier and price, and the
        price changes since (an hour is charged at the price of its moment)."""
        with UnitOfWork(self._engine, write=False) as uow:
            s = uow.session
            rows = s.execute(
                select(UtilizationRow.workload_id, UtilizationRow.team_id, UtilizationRow.sku_id,
                       UtilizationRow.bucket_start_s, UtilizationRow.bucket_s, UtilizationRow.gpus_allocated,
                       UtilizationRow.gpu_util, UtilizationRow.pool_id, UtilizationRow.gpu_mem_gb)
                .where(UtilizationRow.bucket_start_s >= t0_s - DAY_S, UtilizationRow.bucket_start_s < t1_s)
                .order_by(UtilizationRow.workload_id, UtilizationRow.bucket_start_s, UtilizationRow.source)
            ).all()  # fmt: skip
            wls = {w.id: w for w in s.scalars(select(WorkloadRow)).all()}
            pools = {p.id: p for p in s.scalars(select(PoolRow)).all()}
            res = s.scalars(select(ReservationRow).where(ReservationRow.status.in_(PAID_STATUSES))).all()
            history = price_history(uow, t0_s - DAY_S, pools.values())
        on_demand: dict[str, tuple[str, int]] = {}
        for p in sorted(pools.values(), key=lambda p: (p.price_uusd_per_gpu_h, p.id)):
            if p.tier == Tier.ON_DEMAND.value:
                on_demand.setdefault(p.sku_id, (p.id, p.price_uusd_per_gpu_h))
        recs = _summed_over_sources(rows)
        for r in recs:  # a SKU without an on-demand pool still needs a price: a visible zero-priced pool
            on_demand.setdefault(r.sku_id, (f"{r.sku_id}-unpriced", 0))
        blocks = [
            ReservedBlock(r.id, r.pool_id, r.sku_id, r.units, r.start_s, r.start_s + term_seconds(r.term_months),
                          r.price_uusd_per_gpu_h)
            for r in res
        ]  # fmt: skip
        by_pool = {p.id: (Tier(p.tier), int(p.price_uusd_per_gpu_h)) for p in pools.values()}
        seen = {r.workload_id for r in recs if r.workload_id in wls}
        return MeterInputs(
            recs,
            {w.id: WorkloadInfo(w.id, w.team_id, w.tenant_id, w.kind, w.name) for w in wls.values()},
            {w: _domain_workload(wls[w]) for w in seen},
            {w: _resource_spec(wls[w]) for w in seen},
            blocks,
            on_demand,
            by_pool,
            history if history.changed else None,
        )

    def snapshot(self, window_s: int = 7 * DAY_S) -> FinOpsSnapshot:
        """The cost package's view of [now - window_s, now), memoized for ``cache_s`` (wall and service clock; at most
        ``MAX_CACHED_WINDOWS`` windows, the newest, an expired one dropped when the next is memoized);
        every write through the API calls :meth:`invalidate`, so a read after a write sees it (a snapshot whose
        build began before an invalidate is returned to its caller but not memoized)."""
        now_s = self._clock.now_s()
        with self._lock:
            hit = self._cache.get(window_s)
            if hit is not None and time.monotonic() - hit[0] < self._cache_s and abs(now_s - hit[1]) <= self._cache_s:
                return hit[2]
            generation = self._generation
        data = self._build(now_s - window_s, now_s)
        with self._lock:
            if generation == self._generation:  # no write since the build began: its books are the store's
                built = time.monotonic()
                for w in [w for w, (at, _, _) in self._cache.items() if built - at >= self._cache_s]:
                    del self._cache[w]  # expired: never served again
                self._cache[window_s] = (built, now_s, data)
                while len(self._cache) > MAX_CACHED_WINDOWS:  # the window is the caller's: keep the newest few
                    del self._cache[min(self._cache, key=lambda w: self._cache[w][0])]
        return data

    def invalidate(self) -> None:
        with self._lock:
            self._cache.clear()
            self._generation += 1

    def _build(self, t0_s: int, t1_s: int) -> FinOpsSnapshot:
        return self.meter.window(self._load(t0_s, t1_s), t0_s, t1_s)

    def workload_view(self, workload_id: str, window_s: int) -> dict[str, Any]:
        """The cost package's numbers for one workload (access is checked by the caller)."""
        data = self.snapshot(window_s)
        if not any(a.workload_id == workload_id for a in data.allocations):
            return {"allocated_gpu_h": 0.0, "used_gpu_h": 0.0, "measured_gpu_h": 0.0, "direct_usd": Decimal("0.00"),
                    "idle_usd": Decimal("0.00"), "shared_usd": Decimal("0.00"), "total_usd": Decimal("0.00"),
                    "by_tier_usd": {}, "utilization": None, "recommendation": None}  # fmt: skip
        wc = self.meter.workload_cost(workload_id, data.result, data.allocations, data.usage, data.recommendations)
        rec = wc.recommendations[0] if wc.recommendations else None
        return {
            "allocated_gpu_h": round(wc.allocated_gpu_h, 6),
            "used_gpu_h": None if wc.used_gpu_h is None else round(wc.used_gpu_h, 6),
            "measured_gpu_h": None if wc.measured_gpu_h is None else round(wc.measured_gpu_h, 6),
            "direct_usd": wc.direct_usd,
            "idle_usd": wc.idle_usd,
            "shared_usd": wc.shared_usd,
            "total_usd": wc.total_usd,
            "by_tier_usd": wc.by_tier_usd,
            "utilization": wc.utilization,
            "recommendation": None if rec is None else recommendation_dict(rec),
        }

    def idle_waste(
        self,
        window_s: int,
        *,
        sku_id: str | None = None,
        pool_ids: frozenset[str] | None = None,
        team_id: str | None = None,
        workload_id: str | None = None,
    ) -> dict[str, Decimal]:
        """Idle waste over the window (``cost/waste.py``: the one definition), for the allocations and pools a
        SKU, a set of pools (a region), a team or a workload covers: ``idle_waste_usd`` = ``idle_unbusy_usd``
        (held, not busy) + ``idle_unallocated_usd`` (paid, held by nobody; none for a single workload)."""
        data = self.snapshot(window_s)
        sku_of_pool = {p.pool_id: p.sku_id for p in data.result.pools}

        def keep_alloc(a: AllocationSpan) -> bool:
            return (
                (sku_id is None or a.sku_id == sku_id)
                and (pool_ids is None or a.pool_id in pool_ids)
                and (team_id is None or a.team_id == team_id)
                and (workload_id is None or a.workload_id == workload_id)
            )

        def keep_line(ln: CostLine) -> bool:
            return (
                workload_id is None
                and (sku_id is None or sku_of_pool.get(ln.pool_id) == sku_id)
                and (pool_ids is None or ln.pool_id in pool_ids)
                and (team_id is None or ln.team_id == team_id)
            )

        w = idle_waste(data.result, data.allocations, data.usage, keep_allocation=keep_alloc, keep_idle_line=keep_line)
        return {
            "idle_waste_usd": units_to_cents(w.total_units),
            "idle_unbusy_usd": units_to_cents(w.unbusy_units),
            "idle_unallocated_usd": units_to_cents(w.unallocated_units),
        }

    # ---- rightsizing changes ----------------------------------------------------------------------------------
    def request_change(
        self, actor: Actor, get_row: Callable[[UnitOfWork, Actor, str], WorkloadRow], workload_id: str, *,
        cpu: float, mem_gb: float, ticket: str, gpus: int | None = None, gpu_sku: str | None = None,
    ) -> str:  # fmt: skip
        actor.require(*WRITERS)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            w = get_row(uow, actor, workload_id)
            if gpu_sku is not None and uow.session.get(SkuRow, gpu_sku) is None:
                raise ValidationError("gpu_sku", f"unknown SKU {gpu_sku!r}")
            before = ResourceSpec(w.cpu, w.mem_gb, w.gpus, w.gpu_sku)
            after = ResourceSpec(cpu, mem_gb, gpus or w.gpus, gpu_sku or w.gpu_sku)
            cid = self._ids.new("chg")
            uow.session.add(RightsizingChangeRow(id=cid, workload_id=workload_id, cpu=cpu, mem_gb=mem_gb, ticket=ticket,
                                                 status="pending", requested_by=actor.user_id, created_at_s=now_s))  # fmt: skip
            detail = {"change_id": cid, "cpu": cpu, "mem_gb": mem_gb, "ticket": ticket,
                      "before": _spec_dict(before), "after": _spec_dict(after)}  # fmt: skip
            uow.audit(at_s=now_s, actor=actor.user_id, action="workload.rightsizing_requested", entity="workload",
                      entity_id=workload_id, detail=detail)  # fmt: skip
            uow.commit()
        self.metrics.record_decision("rightsizing", "proposed", "api_request")
        return cid

    def _change(self, uow: UnitOfWork, row: RightsizingChangeRow) -> RightsizingChange:
        events = uow.session.scalars(
            select(AuditEventRow)
            .where(AuditEventRow.entity_id.in_([row.workload_id, row.id]))
            .order_by(AuditEventRow.id)
        ).all()
        before = after = None
        history: list[StatusChange[ChangeStatus]] = []
        for e in events:
            d = json.loads(e.detail_json)
            if e.action == "workload.rightsizing_requested" and d.get("change_id") == row.id:
                w = uow.session.get(WorkloadRow, row.workload_id)
                before = _spec(d["before"]) if "before" in d else None
                after = _spec(d["after"]) if "after" in d else None
                if before is None and w is not None:  # recorded before specs were kept: the spec it asked from
                    before = ResourceSpec(w.cpu, w.mem_gb, w.gpus, w.gpu_sku)
                    after = ResourceSpec(row.cpu, row.mem_gb, w.gpus, w.gpu_sku)
            elif e.entity == "change" and e.entity_id == row.id:
                history.append(StatusChange(e.at_s, ChangeStatus(d["from"]), ChangeStatus(d["to"]), e.actor,
                                            d.get("reason", "")))  # fmt: skip
        if before is None or after is None:
            raise NotFoundError("change", row.id)
        return RightsizingChange(row.id, row.ticket, row.workload_id, before, after, (), _status_of(row.status),
                                 history)  # fmt: skip

    def get_change(self, actor: Actor, change_id: str) -> dict[str, Any]:
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(RightsizingChangeRow, change_id)
            if row is None:
                raise NotFoundError("change", change_id)
            w = uow.session.get(WorkloadRow, row.workload_id)
            actor.require_owner(w.team_id if w else "", "change", change_id)
            return change_dict(self._change(uow, row), row)

    def transition(self, actor: Actor, change_id: str, target: ChangeStatus, reason: str) -> dict[str, Any]:
        """Apply (PROPOSED -> APPLIED) or roll back (APPLIED -> ROLLED_BACK): the workload's spec changes, the
        workload's version goes up, and both are audit-logged, in one transaction."""
        actor.require(*WRITERS)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = uow.session.scalar(uow.lock(select(RightsizingChangeRow).where(RightsizingChangeRow.id == change_id)))
            if row is None:
                raise NotFoundError("change", change_id)
            w = uow.session.scalar(uow.lock(select(WorkloadRow).where(WorkloadRow.id == row.workload_id)))
            if w is None:
                raise NotFoundError("workload", row.workload_id)
            actor.require_owner(w.team_id, "change", change_id)
            change = self._change(uow, row)
            spec = ResourceSpec(w.cpu, w.mem_gb, w.gpus, w.gpu_sku)
            source = change.status
            new = change_spec(spec, change, target, at_s=now_s, actor=actor.user_id, reason=reason)
            if new != spec:  # apply / roll back: the workload's desired spec changes (a cancel changes nothing)
                res = uow.session.execute(
                    update(WorkloadRow)
                    .where(WorkloadRow.id == w.id, WorkloadRow.version == w.version)
                    .values(cpu=new.cpu, mem_gb=new.mem_gb, gpus=new.gpus, gpu_sku=new.sku_id, version=w.version + 1)
                    .execution_options(synchronize_session=False)
                )
                if res.rowcount != 1:  # type: ignore[attr-defined]
                    raise ConflictError(f"workload {w.id} changed concurrently; retry")
            uow.session.execute(
                update(RightsizingChangeRow)
                .where(RightsizingChangeRow.id == row.id, RightsizingChangeRow.status == row.status)
                .values(status=_row_status(change.status))
                .execution_options(synchronize_session=False)
            )
            uow.audit(at_s=now_s, actor=actor.user_id, action=f"change.{change.status.value}", entity="change",
                      entity_id=row.id, detail={"from": source.value, "to": change.status.value, "reason": reason,
                                                "workload_id": w.id, "spec": _spec_dict(new), "ticket": row.ticket})  # fmt: skip
            uow.commit()
            row.status = _row_status(change.status)
            out = change_dict(change, row)
        self.metrics.record_decision("rightsizing", change.status.value, "api_request")  # free text stays in the audit
        self.invalidate()
        return out

    # ---- metrics ----------------------------------------------------------------------------------------------
    def refresh_gauges(self) -> None:
        """Queue lengths from the store, costs from the last 7 days' books (memoized)."""
        with UnitOfWork(self._engine, write=False) as uow:
            counts = dict(
                uow.session.execute(select(ReservationRow.status, func.count()).group_by(ReservationRow.status)).all()
            )
            pending_changes = uow.session.scalar(
                select(func.count()).select_from(RightsizingChangeRow).where(RightsizingChangeRow.status == "pending")
            )
            last_pass = uow.session.scalar(
                select(AuditEventRow.detail_json)
                .where(AuditEventRow.action == "reconciler.pass")
                .order_by(AuditEventRow.at_s.desc(), AuditEventRow.id.desc())
                .limit(1)
            )
        self.metrics.set_queue_length("reservations_pending_approval", int(counts.get("pending_approval", 0)))
        waiting = int(counts.get("approved", 0)) + int(counts.get("blocked", 0))  # blocked: held by a permission
        self.metrics.set_queue_length("reservations_awaiting_submission", waiting)
        self.metrics.set_queue_length("rightsizing_changes_pending", int(pending_changes or 0))
        # the steps the last planning pass put off to the next one (the store was blocked or slow: service/reconciler)
        self.metrics.set_queue_length("reconciler_deferred", deferred_steps(json.loads(last_pass)) if last_pass else 0)
        data = self.snapshot()
        self.metrics.record_cost(data.result, self.meter.chargeback(data.result, data.allocations, "team", data.usage))
        self.metrics.idle_findings.clear()
        for f_action in {f.action for f in data.idle}:
            self.metrics.idle_findings.labels(f_action.value).set(sum(1 for f in data.idle if f.action is f_action))


def _spec_dict(s: ResourceSpec) -> dict[str, Any]:
    return {"cpu": s.cpu, "mem_gb": s.mem_gb, "gpus": s.gpus, "gpu_sku": s.sku_id}


def _spec(d: dict[str, Any]) -> ResourceSpec:
    return ResourceSpec(float(d["cpu"]), float(d["mem_gb"]), int(d["gpus"]), str(d["gpu_sku"]))


def recommendation_dict(r: Recommendation) -> dict[str, Any]:
    return {
        "current": _spec_dict(r.current),
        "recommended": _spec_dict(r.recommended),
        "changed": r.changed,
        "reasons": list(r.reasons),
        "monthly_saving_usd": r.monthly_saving_usd,
        "evidence": {k: (None if math.isnan(v) else round(v, 6)) for k, v in r.evidence.items()},  # NaN -> null
    }


def change_dict(c: RightsizingChange, row: RightsizingChangeRow) -> dict[str, Any]:
    return {
        "change_id": c.change_id,
        "workload_id": c.workload_id,
        "ticket": c.ticket,
        "status": c.status.value,
        "before": _spec_dict(c.before),
        "after": _spec_dict(c.after),
        "requested_by": row.requested_by,
        "created_at_s": row.created_at_s,
        "history": [
            {"at_s": e.at_s, "from": e.source.value, "to": e.target.value, "actor": e.actor, "reason": e.reason}
            for e in c.history
        ],
    }


def _resource_spec(w: WorkloadRow) -> ResourceSpec:
    return ResourceSpec(w.cpu, w.mem_gb, w.gpus, w.gpu_sku)


def _domain_workload(w: WorkloadRow) -> Workload:
    serving = w.kind == WorkloadKind.SERVING.value
    try:
        prio = Priority.parse(w.priority)
    except KeyError:
        prio = Priority.NORMAL
    return Workload(w.id, w.name, WorkloadKind.SERVING if serving else WorkloadKind.TRAINING, w.team_id, w.tenant_id,
                    prio, (w.gpu_sku,), max(w.gpus, 1), checkpoint_interval_s=w.checkpoint_interval_s,
                    scaling=ServingScaling(w.min_replicas, max(w.max_replicas, w.min_replicas), w.target_rps or 1.0)
                    if serving else None)  # fmt: skip


def usd(units: int) -> Decimal:
    return units_to_cents(units)
