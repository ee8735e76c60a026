"""The service's control loop: one active instance (the leader, :mod:`gpufleet.service.leader`) runs the loop's
stages on the store, at the procurement cadence (``plan_interval_s``, daily by default).

One pass (:meth:`Reconciler.run_once`), every stage through control/:

The background cadence (``gpufleet serve``, ``gpufleet reconcile``) runs a pass when :meth:`Reconciler.due`;
``gpufleet reconcile --once`` runs one now.

1. **provider**: bring reservations in line with the provider (:meth:`ReservationService.reconcile`: submit the
   approved, activate and expire commitments); with the AWS provider, buy the Capacity Block purchases left
   ``approved`` (:meth:`CapacityBlockService.reconcile`, under each one's purchase key: a crash or a lost answer
   between the approval and the purchase is bought once);
2. **forecast**: each SKU with utilization ingested in the last 28 days gets its daily demand forecast
   (:class:`CapacityService`, i.e. :func:`gpufleet.control.forecasting.demand_quantiles`), recorded for
   accuracy tracking like every served forecast;
3. **procure**: each SKU is planned in the regions :func:`gpufleet.control.proposing.plan_regions` names
   (:mod:`gpufleet.service.plan_regions`): every region with a reserved pool where it ran (records naming a pool
   there) or where runs are registered, each on its own use, and its main region
   (:func:`~gpufleet.control.proposing.choose_plan_region`: where most of its measured use ran among the regions
   with a reserved pool, else where its reservations are held) on the rest (records naming no pool, or a pool of a
   region without a reserved pool), so no use is bought twice. In each, the loop's procurer decides, the same
   object the simulator runs (``ControlLoop.gpufleet(...).procurer``, the forecast-led commitment LP, assembled
   by :meth:`ProcurementService.loop` for each plan, the quotas of the SKU's stored on-demand, spot and secondary
   pools in the regions that plan reads as tier limits: a regional quota is counted by one plan). Its context is
   that use per hour over the last 28 days, the region's reserved pool, the loop's forecast and the units held or
   on order at lead time (:meth:`ProcurementService.context`). Its proposals go
   into the approval workflow (:meth:`ProcurementService.commit`) as the ``reconciler`` (an ML-platform admin
   principal): pending reservations that need their approvals as usual (the reconciler never approves). Held and
   pending reservations count as committed, and idempotency keys make a re-run propose nothing twice.
   The context carries the SKU-region's registered planned runs (:mod:`gpufleet.service.planned_runs`), so the
   procurer reserves ahead of them (``planned_run_reserve``). A run in a region without a reserved pool of the
   SKU is not read: the SKU's entry names it (``planned_runs_not_read``). A SKU with runs registered but no
   utilization in the lookback (not used yet) is planned from 28 days of zeros in each region its runs are
   registered in (``region_reason`` ``planned_runs_region``), so its first runs are reserved ahead of;
4. **placements**: every cluster's placements are re-evaluated (:func:`gpufleet.control.packing.plan_repack`):
   the moves that would free whole nodes, recorded, not applied (no node actuator is wired to the store).

Each pass is one audit event ``reconciler.pass`` naming the process that ran it (``host:pid``) with what each
stage decided. A failing step (a SKU, a SKU-region, a cluster, the provider stage, the Capacity Block purchases) is
reported with its reason (``error``) and does not stop the others, whatever it failed on: a refused proposal, a
provider answer the adapter cannot read, or a database error of its own (a row another session holds locked past the
statement timeout); the pass is recorded, so the next one waits instead of re-running every SKU at each poll: its
period, or ``retry_s`` (``plan_retry_s``) when steps failed on the store's availability (``store_failures`` in its
audit event: those steps are transient). A store that blocks every step (a lock over a whole table: an index build, an admin's ``LOCK TABLE``; the
connection lost) is noticed after ``BLOCKED_AFTER`` steps in a row fail on its availability and, on PostgreSQL,
another session holds or awaits a lock over one of the schema's tables (``pg_locks``; else the failures were rows
other sessions hold, two SKUs each locked by a stalled request, and the pass goes on): the pass stops there
(``stopped``: ``store blocked: ...``), names the remaining SKUs and clusters as ``skipped`` instead of waiting a
statement timeout for each, and is recorded; the background cadence (:meth:`Reconciler.due`) tries the next pass
after ``retry_s`` (``plan_retry_s``, doubled for each such partial pass in a row, at most the period) instead of a whole
period (``gpufleet reconcile --once`` re-runs it at once). A
store that is slow rather than locked (every write waits past the statement timeout, no table locked: an overloaded
disk) would still cost one statement timeout per SKU, the leader loop waiting meanwhile (no submission): at
``STORE_FAILURES_PER_PASS`` availability failures in one pass, in a row or not, the pass stops the same way
(``stopped``: ``store slow: ...``, logged, recorded in its audit event, the rest named as ``skipped``). A store slow
just under the statement timeout fails no step; the pass's deadline (``deadline_s``: ``plan_pass_deadline_s``) stops
it the same way before its next step (``stopped``: ``deadline: ...``). Each pass takes first the SKUs and clusters the
last recorded pass skipped, so passes stopped each time still reach every one by turns.

A pass is long (every SKU forecast and planned) and the lead can be lost during it (the leader's lock session
killed or cut, :mod:`gpufleet.service.leader`). Before each SKU-region's proposals and before recording itself, the
pass confirms the lead (``leads``: the election's :meth:`~gpufleet.service.leader.Leadership.refresh`, one round
trip); once it is lost the pass stops, writes nothing more and is not recorded (``stopped`` says where): the new
leader runs its own. A write already under way when the lead passes (stuck on a lock after that check) is fenced:
every write of the pass re-checks the lead's fencing epoch in its own transaction before it commits
(:func:`~gpufleet.service.uow.fenced`), rolls back when another process took the lead, and the pass stops there
(``stopped``: ``fenced out: ...``, not recorded).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import SQLAlchemyError

from gpufleet.adapters.sql.engine import unavailable_reason
from gpufleet.adapters.sql.models import AuditEventRow, ClusterRow
from gpufleet.control.proposing import PlanRegion
from gpufleet.domain.errors import GpufleetError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.binpack import BinpackService
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import Clock
from gpufleet.service.pass_records import newest_pass, partial_in_a_row, skipped_by_last_pass
from gpufleet.service.plan_regions import PlanMap
from gpufleet.service.procurement import ProcurementService
from gpufleet.service.reservations import ReservationService
from gpufleet.service.uow import FencedOut, UnitOfWork, fenced

if TYPE_CHECKING:
    from gpufleet.service.capacity_blocks import CapacityBlockService

log = logging.getLogger("gpufleet.reconciler")

DAY_S = 86_400
RECONCILER = Actor("reconciler", Role.ML_PLATFORM_ADMIN, None)
# steps in a row (SKUs, SKU-regions, clusters, the provider stages) failing on the store's availability (a statement
# timeout: a lock held over every SKU's rows; the connection lost) after which the pass stops instead of waiting a
# statement timeout for each of the rest
BLOCKED_AFTER = 2
# steps of one pass, in a row or not, failing on the store's availability after which the pass stops whatever
# pg_locks shows: a slow store (every write waits past the statement timeout, no table locked) costs at most this many
# statement timeouts, not one per SKU, while the leader loop waits for the pass (no submission meanwhile)
STORE_FAILURES_PER_PASS = 3


# locks over a whole table of the schema that keep writes out, held or awaited (a waiting ALTER TABLE queues every
# writer behind it) by another session
_TABLE_LOCKS = (
    "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE l.locktype = 'relation' "
    "AND l.pid <> pg_backend_pid() AND c.relnamespace = current_schema()::regnamespace AND l.mode IN "
    "('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"
)


def failure_reason(exc: Exception) -> str:
    """One line saying why a SKU's (or cluster's) stage failed: a refused request's own message, a database that
    did not answer (:func:`unavailable_reason`), or the error's type and first line (logged with its traceback)."""
    if isinstance(exc, GpufleetError):
        return str(exc)
    why = unavailable_reason(exc)
    if why is None:
        log.error("reconciler: unexpected error", exc_info=exc)
        why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    return why


def process_name() -> str:
    """``host:pid`` of this process (what the audit event names)."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}"


@dataclass(slots=True)
class ReconcilePass:
    """What one pass decided, stage by stage (JSON-ready through :meth:`as_dict`)."""

    at_s: int
    process: str
    provider: dict[str, Any] = field(default_factory=dict)  # {"error": why} when the stage failed
    capacity_blocks: dict[str, Any] | None = None  # None: no AWS provider, no Capacity Blocks
    forecasts: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    placements: list[dict[str, Any]] = field(default_factory=list)
    # the pass stopped here: it lost the lead (``lead_lost``: not recorded, the new leader runs its own), or the store
    # is blocked (recorded, the rest named as skipped)
    stopped: str | None = None
    lead_lost: bool = False
    store_failures: int = 0  # steps in a row the store failed to answer (statement timeout, connection lost)
    store_failures_in_pass: int = 0  # steps of the pass, in a row or not, the store failed to answer

    def as_dict(self) -> dict[str, Any]:
        return {
            **({} if self.stopped is None else {"stopped": self.stopped}),
            # steps failed on the store's availability: the pass is retried after ``plan_retry_s``
            **({"store_failures": self.store_failures_in_pass} if self.store_failures_in_pass else {}),
            "at_s": self.at_s,
            "process": self.process,
            "provider": self.provider,
            **({} if self.capacity_blocks is None else {"capacity_blocks": self.capacity_blocks}),
            "forecasts": self.forecasts,
            "proposals": self.proposals,
            "placements": self.placements,
        }


class Reconciler:
    """See the module docstring. ``within_days``: the hours ahead (x 24) the loop's forecaster forecasts for the
    procurer (the simulator forecasts its procurement period, 7 days by default); ``forecast_days``: the horizon
    of the recorded daily capacity forecast; ``leads``: whether this process still leads, asked before each write
    stage (default: always, the sole process); ``epoch``: the fencing epoch of this process's lead
    (:meth:`~gpufleet.service.leader.Leadership.epoch`), which every write of the pass checks before it commits
    (default None: not fenced)."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        *,
        reservations: ReservationService,
        capacity: CapacityService,
        procurement: ProcurementService,
        binpack: BinpackService,
        within_days: int = 7,
        forecast_days: int = 30,
        capacity_blocks: CapacityBlockService | None = None,
        leads: Callable[[], bool] = lambda: True,
        epoch: Callable[[], int | None] = lambda: None,
        retry_s: float = 0.0,
        deadline_s: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_s = retry_s
        self.deadline_s = deadline_s
        self._monotonic = monotonic
        self._deadline_at: float | None = None  # the running pass's deadline (monotonic), None: none
        self._deferred: set[str] = set()  # the SKUs and clusters the last recorded pass skipped: planned first
        self._streak: tuple[int, int] | None = None  # (id of the newest recorded pass, partial passes in a row)
        self._blocks = capacity_blocks
        self._leads = leads
        self._epoch = epoch
        self._engine = engine
        self._clock = clock
        self._reservations = reservations
        self._capacity = capacity
        self._procurement = procurement
        self._binpack = binpack
        self.within_days = within_days
        self.forecast_days = forecast_days

    def last_pass_s(self) -> int | None:
        """When the last pass (by any process) was recorded, by the service clock; None if never. A pass recorded
        after this clock's now (by a process whose clock ran ahead) is not the last one: taken as such it would
        stall the cadence of every process until their clocks caught up."""
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            got = uow.session.scalar(
                select(func.max(AuditEventRow.at_s)).where(
                    AuditEventRow.action == "reconciler.pass", AuditEventRow.at_s <= now_s
                )
            )
        return None if got is None else int(got)

    def due(self, interval_s: float, leading_since_s: int) -> bool:
        """Whether a background pass is due: the last recorded pass is ``interval_s`` old (the cadence survives
        restarts and failovers), or, with none recorded yet, this process has led for ``interval_s`` (a fresh
        installation is not planned for before it has been watched for one period). A recorded pass that was
        partial (:func:`~gpufleet.service.pass_records.partial`: stopped early, its rest named as skipped, or steps
        failed on the store's availability) is followed sooner: after :meth:`wait_after` it, ``retry_s`` doubled for
        each partial pass in a row, at most ``interval_s``."""
        last_s, partial = self.recent_passes()
        if last_s is None:
            return self._clock.now_s() - leading_since_s >= interval_s
        return self._clock.now_s() - last_s >= self.wait_after(interval_s, partial)

    def wait_after(self, interval_s: float, partial: int) -> float:
        """Seconds from the last recorded pass to the next, after ``partial`` partial passes in a row: the period
        when the last pass was complete (or ``retry_s`` is 0), else ``retry_s * 2 ** (partial - 1)``, at most the
        period."""
        if partial <= 0 or self.retry_s <= 0:
            return interval_s
        return min(interval_s, self.retry_s * 2.0 ** min(partial - 1, 64))

    def recent_passes(self) -> tuple[int | None, int]:
        """When the newest recorded pass (by any process, not after this clock's now: :meth:`last_pass_s`) ran and
        how many of the newest passes in a row were partial (0: the newest was complete). The leader asks at each
        poll: the passes' details are read only when a new one was recorded since the last question."""
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            last = newest_pass(uow.session, now_s)
            if last is None:
                return None, 0
            if self._streak is None or self._streak[0] != last[0]:
                self._streak = (last[0], partial_in_a_row(uow.session, now_s))
        return last[1], self._streak[1]

    def run_once(self) -> ReconcilePass:
        """One pass of every stage (blocking: database and provider I/O). Call it on the leader only."""
        now_s = self._clock.now_s()
        out = ReconcilePass(now_s, process_name())
        self._deadline_at = None if self.deadline_s <= 0 else self._monotonic() + self.deadline_s
        self._deferred = self._deferred_by_last_pass(now_s)
        try:
            with fenced(self._epoch()):  # every write of the pass commits only while this process's epoch holds
                self._run(out, now_s)
        except FencedOut as exc:
            out.stopped, out.lead_lost = f"fenced out: {exc}", True
            log.warning("reconciler pass stopped: %s (its write rolled back)", out.stopped)
        return out

    def _run(self, out: ReconcilePass, now_s: int) -> None:
        try:
            r = self._reservations.reconcile()
        except Exception as exc:  # this step's failure, reported; the other stages still run
            out.provider = {"error": self._failed(out, exc)}
        else:
            self._answered(out)
            out.provider = {"submitted": r.submitted, "activated": r.activated, "expired": r.expired,
                            "cancelled": r.cancelled, "still_pending": r.still_pending, "errors": r.errors,
                            "warnings": r.warnings}  # fmt: skip
        if self._blocks is not None:
            try:
                out.capacity_blocks = self._blocks.reconcile(RECONCILER)
            except Exception as exc:  # as the provider stage
                out.capacity_blocks = {"error": self._failed(out, exc)}
            else:
                self._answered(out)
        plans = self._procurement.plan_map(now_s // DAY_S * DAY_S)  # where each SKU is planned, on which use
        forecast_ok = set(plans.regions) - set(plans.measured)  # a SKU not used yet has no forecast to make
        for sku in self._first(plans.measured):
            if self._over(out):  # the store is blocked or the deadline passed: the rest is named, not waited for
                out.forecasts.append({"sku": sku, "skipped": out.stopped})
                continue
            try:
                fc = self._capacity.forecast(RECONCILER, sku_id=sku, days=self.forecast_days, loop=True)
            except Exception as exc:  # this SKU's failure, reported; the others still run
                out.forecasts.append({"sku": sku, "error": self._failed(out, exc)})
                continue
            self._answered(out)
            forecast_ok.add(sku)
            out.forecasts.append({"sku": sku, "method": fc["method"], "history_days": fc["history_days"],
                                  "gap_units": fc["gap_units"]})  # fmt: skip
        for sku in self._first(forecast_ok):
            if self._over(out) and not out.lead_lost:
                out.proposals.append({"sku": sku, "region": None, "skipped": out.stopped, "created": []})
                continue
            out.proposals.extend(self._plan_sku(sku, plans, out))
            if out.lead_lost:
                return
        for cluster in self._first(self._clusters()):
            if self._over(out):
                out.placements.append({"cluster": cluster, "skipped": out.stopped})
                continue
            try:
                rep = self._binpack.report(RECONCILER, cluster)
            except Exception as exc:  # e.g. removed since it was listed: reported, the others still run
                out.placements.append({"cluster": cluster, "error": self._failed(out, exc)})
                continue
            self._answered(out)
            out.placements.append({"cluster": cluster, "fragmentation": rep["fragmentation"],
                                   "moves": len(rep["suggested_moves"]), "nodes_freed": rep["nodes_freed"],
                                   "fragmentation_after": rep["fragmentation_after"]})  # fmt: skip
        if self._lost_lead(out, "before recording the pass"):
            return
        with UnitOfWork(self._engine, write=True) as uow:
            uow.audit(at_s=now_s, actor=RECONCILER.user_id, action="reconciler.pass", entity="reconciler",
                      entity_id=out.process, detail=out.as_dict())  # fmt: skip
            uow.commit()
        created = sum(len(p["created"]) for p in out.proposals)
        log.info("reconciler pass: %d SKUs forecast, %d reservations proposed", len(out.forecasts), created)

    def _failed(self, out: ReconcilePass, exc: Exception) -> str:
        """The reason of a step's failure (:func:`failure_reason`); the store's availability failures are counted:
        at ``BLOCKED_AFTER`` of them in a row with a table locked, or at ``STORE_FAILURES_PER_PASS`` in the pass, the
        pass is stopped (``out.stopped``): the store is blocked, or slow."""
        if isinstance(exc, FencedOut):  # not this step's failure: the pass has no lead left to write under
            raise exc
        why = failure_reason(exc)
        if unavailable_reason(exc) is None:
            out.store_failures = 0
            return why
        out.store_failures += 1
        out.store_failures_in_pass += 1
        if out.store_failures_in_pass >= STORE_FAILURES_PER_PASS and out.stopped is None:
            out.stopped = (f"store slow: {out.store_failures_in_pass} steps of this pass failed on the database "
                           f"({why}); the rest is deferred to the next pass")  # fmt: skip
            log.warning("reconciler pass stopped: %s", out.stopped)
            return why
        if out.store_failures >= BLOCKED_AFTER and out.stopped is None:
            if not self._tables_locked():
                log.warning("reconciler: %d steps in a row failed on the database, but no table is locked: rows "
                            "other sessions hold, the pass goes on (%s)", out.store_failures, why)  # fmt: skip
                out.store_failures = 0
                return why
            out.stopped = f"store blocked: {out.store_failures} steps in a row failed on the database ({why})"
            log.warning("reconciler pass stopped: %s; the rest of the pass is skipped", out.stopped)
        return why

    def _tables_locked(self) -> bool:
        """Whether the store is blocked as a whole: on PostgreSQL, another session holds or awaits a lock over one of
        the schema's tables that keeps writes out (SHARE and up: an index build, ``LOCK TABLE``, ``ALTER TABLE``), or
        the question itself fails (the connection lost). False there means the failures were rows other sessions
        hold (two SKUs each locked by a stalled request): the pass goes on. SQLite: always True (its lock is the
        whole database's)."""
        if self._engine.dialect.name != "postgresql":
            return True
        try:
            with self._engine.connect() as conn:
                n = conn.execute(text(_TABLE_LOCKS)).scalar_one()
        except Exception:  # the store does not answer even this: blocked
            return True
        return bool(n)

    def _over(self, out: ReconcilePass) -> bool:
        """Whether the pass has stopped (``out.stopped``), stopping it first when it ran past its deadline
        (``deadline_s``): the steps left are named as skipped, deferred like those of a pass the store stopped."""
        if out.stopped is None and self._deadline_at is not None and self._monotonic() >= self._deadline_at:
            out.stopped = (f"deadline: the pass ran past its {self.deadline_s:g} s (plan_pass_deadline_s); the rest "
                           "is deferred to the next pass")  # fmt: skip
            log.warning("reconciler pass stopped: %s", out.stopped)
        return out.stopped is not None

    def _first(self, names: Iterable[str]) -> list[str]:
        """``names`` sorted, those the last recorded pass skipped first: a pass stopped each time at its deadline
        (or on the store) still reaches, by turns, every SKU and cluster."""
        return sorted(names, key=lambda n: (n not in self._deferred, n))

    def _deferred_by_last_pass(self, now_s: int) -> set[str]:
        """The SKUs and clusters the newest recorded pass (not after ``now_s``) named as skipped; none when the
        store does not answer (the pass finds out at its own steps)."""
        try:
            with UnitOfWork(self._engine, write=False) as uow:
                return skipped_by_last_pass(uow.session, now_s)
        except SQLAlchemyError as exc:
            log.warning("reconciler: the last pass could not be read (%s); planned in name order", failure_reason(exc))
            return set()

    @staticmethod
    def _answered(out: ReconcilePass) -> None:
        """A step the store answered: the run of availability failures is broken."""
        out.store_failures = 0

    def _lost_lead(self, out: ReconcilePass, where: str) -> bool:
        """True (and ``out.stopped`` set) when this process no longer leads: the pass must write nothing more."""
        if self._leads():
            return False
        out.stopped = f"lost the lead {where}"
        out.lead_lost = True
        log.warning("reconciler pass stopped: %s (another process leads now)", out.stopped)
        return True

    def _commit_into(self, entry: dict[str, Any], plan: PlanRegion, out: ReconcilePass) -> bool:
        """The loop's procurement stage for the entry's SKU and region on the use ``plan`` reads
        (``ProcurementService.commit``, which assembles the loop for the plan), its answer written into the entry,
        or its error; True when it ran."""
        try:
            got = self._procurement.commit(
                RECONCILER, sku_id=entry["sku"], region_id=entry["region"], forecast_h=self.within_days * 24,
                plan=plan,
            )  # fmt: skip
        except Exception as exc:  # this SKU-region's failure, reported; the others still run
            entry["error"] = self._failed(out, exc)
            return False
        self._answered(out)
        entry.update(created=[c["reservation_id"] for c in got["created"]], procurer=got["procurer"],
                     context=got["context"], proposed=got["proposals"],
                     secondary_base=got["secondary_base"])  # fmt: skip
        return True

    def _plan_sku(self, sku: str, plans: PlanMap, out: ReconcilePass) -> list[dict[str, Any]]:
        """One entry per region the SKU is planned in (main region first), each the loop's procurement stage on the
        use its plan reads; one entry with region None when it is planned nowhere (no reserved pool). The runs no
        plan reads, or whose plan failed, are named (``planned_runs_not_read``), not dropped silently. Stops
        (``out.stopped``) before a region when the lead is lost."""
        where = plans.regions.get(sku, ())
        if not where:
            entry: dict[str, Any] = {"sku": sku, "region": None, "region_reason": "no_reserved_pool", "created": []}
            where_not = plans.not_read(sku)
            if where_not:
                entry["planned_runs_not_read"] = where_not
            return [entry]
        entries: list[dict[str, Any]] = []
        for plan in where:
            if self._lost_lead(out, f"before planning {sku} in {plan.region}"):
                break
            entry = {"sku": sku, "region": plan.region, "region_reason": plan.reason, "created": []}
            if self._over(out):  # the store is blocked or the deadline passed: named, not waited for
                entry["skipped"] = out.stopped
                entries.append(entry)
                continue
            failed = not self._commit_into(entry, plan, out)
            # the runs this entry was to read when its plan failed (e.g. its reserved pool was removed since), and
            # on the main entry those of regions no plan reads
            not_read = [rid for rid, r in plans.runs.get(sku, []) if failed and r == plan.region]
            not_read += plans.not_read(sku) if not entries else []
            if not_read:
                entry["planned_runs_not_read"] = sorted(not_read)
                log.warning("reconciler: planned runs of %s not read in %s: %s", sku, plan.region, sorted(not_read))
            entries.append(entry)
        return entries

    def _clusters(self) -> list[str]:
        with UnitOfWork(self._engine, write=False) as uow:
            return list(uow.session.scalars(select(ClusterRow.id).order_by(ClusterRow.id)).all())
