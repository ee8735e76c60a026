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
3. **procure**: for each such SKU, one region is chosen (:func:`gpufleet.control.proposing.choose_plan_region`:
   where most of its measured use ran among the regions with a reserved pool, else where its reservations are
   held) and the loop's procurer decides, the same object the simulator runs
   (``ControlLoop.gpufleet(...).procurer``, the forecast-led commitment LP, assembled once per pass by
   :meth:`ProcurementService.loop`, the quotas of the SKU's stored spot and secondary pools as tier limits). Its
   context is the SKU's hourly demand of the last 28 days, the region's reserved pool, the loop's forecast and
   the units held or on order at lead time (:meth:`ProcurementService.context`). Its proposals go into the
   approval workflow (:meth:`ProcurementService.commit`) as the ``reconciler`` (an ML-platform admin principal):
   pending reservations that need their approvals as usual (the reconciler never approves). Held and pending
   reservations count as committed, and idempotency keys make a re-run propose nothing twice.
   The context carries the SKU-region's registered planned runs (:mod:`gpufleet.service.planned_runs`), so the
   procurer reserves ahead of them (``planned_run_reserve``). A run registered in another region of the SKU is
   not read by the pass (one region per SKU): the SKU's entry names it (``planned_runs_not_read``). A SKU with
   runs registered but no utilization in the lookback (not used yet) is planned from 28 days of zeros in each
   region its runs are registered in (``region_reason`` ``planned_runs_region``), so its first runs are reserved
   ahead of;
4. **placements**: every cluster's placements are re-evaluated (:func:`gpufleet.control.packing.plan_repack`):
   the moves that would free whole nodes, recorded, not applied (no node actuator is wired to the store).

Each pass is one audit event ``reconciler.pass`` naming the process that ran it (``host:pid``) with what each
stage decided. A failing SKU is reported with its reason and does not stop the others.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, select

from gpufleet.adapters.sql.models import (
    AuditEventRow,
    ClusterRow,
    PlannedRunRow,
    PoolRow,
    ReservationRow,
    UtilizationRow,
)
from gpufleet.control.proposing import choose_plan_region
from gpufleet.domain.errors import GpufleetError
from gpufleet.domain.pools import Tier
from gpufleet.service.auth import Actor, Role
from gpufleet.service.binpack import BinpackService
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import Clock
from gpufleet.service.planned_runs import to_come
from gpufleet.service.procurement import HELD_STATUSES, LOOKBACK_DAYS, ProcurementService
from gpufleet.service.reservations import ReservationService
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.service.capacity_blocks import CapacityBlockService

log = logging.getLogger("gpufleet.reconciler")

DAY_S = 86_400
RECONCILER = Actor("reconciler", Role.ML_PLATFORM_ADMIN, None)


def process_name() -> str:
    """``host:pid`` of this process (what the audit event names)."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}"


@dataclass(slots=True)
class ReconcilePass:
    """What one pass decided, stage by stage (JSON-ready through :meth:`as_dict`)."""

    at_s: int
    process: str
    provider: dict[str, list[str]] = field(default_factory=dict)
    capacity_blocks: dict[str, list[str]] | None = None  # None: no AWS provider, no Capacity Blocks
    forecasts: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    placements: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
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
    of the recorded daily capacity forecast."""

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
    ) -> None:
        self._blocks = capacity_blocks
        self._engine = engine
        self._clock = clock
        self._reservations = reservations
        self._capacity = capacity
        self._procurement = procurement
        self._binpack = binpack
        self.within_days = within_days
        self.forecast_days = forecast_days

    def last_pass_s(self) -> int | None:
        """When the last pass (by any process) was recorded, by the service clock; None if never."""
        with UnitOfWork(self._engine, write=False) as uow:
            got = uow.session.scalar(
                select(func.max(AuditEventRow.at_s)).where(AuditEventRow.action == "reconciler.pass")
            )
        return None if got is None else int(got)

    def due(self, interval_s: float, leading_since_s: int) -> bool:
        """Whether a background pass is due: the last recorded pass is ``interval_s`` old (the cadence survives
        restarts and failovers), or, with none recorded yet, this process has led for ``interval_s`` (a fresh
        installation is not planned for before it has been watched for one period)."""
        last = self.last_pass_s()
        return self._clock.now_s() - (leading_since_s if last is None else last) >= interval_s

    def run_once(self) -> ReconcilePass:
        """One pass of every stage (blocking: database and provider I/O). Call it on the leader only."""
        now_s = self._clock.now_s()
        out = ReconcilePass(now_s, process_name())
        r = self._reservations.reconcile()
        out.provider = {"submitted": r.submitted, "activated": r.activated, "expired": r.expired,
                        "cancelled": r.cancelled, "still_pending": r.still_pending}  # fmt: skip
        if self._blocks is not None:
            out.capacity_blocks = self._blocks.reconcile(RECONCILER)
        skus, used_by_region, reserved_regions, held_by_region = self._observe(now_s)
        regions = {
            sku: choose_plan_region(
                used_by_region.get(sku, {}), reserved_regions.get(sku, []), held_by_region.get(sku, {})
            )
            for sku in skus
        }
        runs = self._planned_runs(now_s)
        unused = sorted(set(runs) - set(skus))  # SKUs not used yet with runs registered: planned from zeros
        # the loop the simulator runs, assembled in its one place, with the stored pools' tier limits
        loop = self._procurement.loop([sku for sku, (r, _) in regions.items() if r is not None] + unused)
        for sku in unused:
            out.proposals.extend(self._plan_unused(sku, runs[sku], loop))
        for sku in skus:
            try:
                fc = self._capacity.forecast(RECONCILER, sku_id=sku, days=self.forecast_days)
            except GpufleetError as exc:
                out.forecasts.append({"sku": sku, "error": str(exc)})
                continue
            out.forecasts.append({"sku": sku, "method": fc["method"], "history_days": fc["history_days"],
                                  "gap_units": fc["gap_units"]})  # fmt: skip
            region, why = regions[sku]
            entry: dict[str, Any] = {"sku": sku, "region": region, "region_reason": why, "created": []}
            elsewhere = sorted(rid for rid, r in runs.get(sku, []) if r != region)
            if elsewhere:  # registered where this pass does not buy: said, not dropped silently
                entry["planned_runs_not_read"] = elsewhere
                log.warning("reconciler: planned runs of %s outside its plan region %s: %s", sku, region, elsewhere)
            if region is not None:
                self._commit_into(entry, loop)
            out.proposals.append(entry)
        for cluster in self._clusters():
            rep = self._binpack.report(RECONCILER, cluster)
            out.placements.append({"cluster": cluster, "fragmentation": rep["fragmentation"],
                                   "moves": len(rep["suggested_moves"]), "nodes_freed": rep["nodes_freed"],
                                   "fragmentation_after": rep["fragmentation_after"]})  # fmt: skip
        with UnitOfWork(self._engine, write=True) as uow:
            uow.audit(at_s=now_s, actor=RECONCILER.user_id, action="reconciler.pass", entity="reconciler",
                      entity_id=out.process, detail=out.as_dict())  # fmt: skip
            uow.commit()
        created = sum(len(p["created"]) for p in out.proposals)
        log.info("reconciler pass: %d SKUs forecast, %d reservations proposed", len(out.forecasts), created)
        return out

    def _observe(
        self, now_s: int
    ) -> tuple[list[str], dict[str, dict[str, float]], dict[str, list[str]], dict[str, dict[str, int]]]:
        """SKUs with utilization in the planning lookback; their GPU-seconds by region (records naming a pool);
        the regions with a reserved pool, per SKU; units of reservations held or on their way, by region."""
        today_s = now_s // DAY_S * DAY_S
        since_s = today_s - LOOKBACK_DAYS * DAY_S
        window = (UtilizationRow.bucket_start_s >= since_s, UtilizationRow.bucket_start_s < today_s)
        with UnitOfWork(self._engine, write=False) as uow:
            s = uow.session
            skus = sorted(s.scalars(select(UtilizationRow.sku_id).where(*window).distinct()).all())
            by_region = s.execute(
                select(UtilizationRow.sku_id, PoolRow.region_id,
                       func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s))
                .join(PoolRow, PoolRow.id == UtilizationRow.pool_id)
                .where(*window)
                .group_by(UtilizationRow.sku_id, PoolRow.region_id)
            ).all()  # fmt: skip
            reserved = s.execute(
                select(PoolRow.sku_id, PoolRow.region_id).where(PoolRow.tier == Tier.RESERVED.value)
            ).all()
            held = s.execute(
                select(ReservationRow.sku_id, ReservationRow.region_id, func.sum(ReservationRow.units))
                .where(ReservationRow.status.in_(HELD_STATUSES))
                .group_by(ReservationRow.sku_id, ReservationRow.region_id)
            ).all()
        used: dict[str, dict[str, float]] = {}
        for sku, region, gpu_s in by_region:
            used.setdefault(sku, {})[region] = float(gpu_s or 0)
        regions: dict[str, list[str]] = {}
        for sku, region in reserved:
            regions.setdefault(sku, []).append(region)
        held_units: dict[str, dict[str, int]] = {}
        for sku, region, units in held:
            held_units.setdefault(sku, {})[region] = int(units or 0)
        return skus, used, regions, held_units

    def _commit_into(self, entry: dict[str, Any], loop: ControlLoop) -> bool:
        """The loop's procurement stage for the entry's SKU and region (``ProcurementService.commit``), its answer
        written into the entry, or its error; True when it ran."""
        try:
            got = self._procurement.commit(
                RECONCILER, sku_id=entry["sku"], region_id=entry["region"], loop=loop,
                forecast_h=self.within_days * 24,
            )  # fmt: skip
        except GpufleetError as exc:
            entry["error"] = str(exc)
            return False
        entry.update(created=[c["reservation_id"] for c in got["created"]], procurer=got["procurer"],
                     context=got["context"], proposed=got["proposals"],
                     secondary_base=got["secondary_base"])  # fmt: skip
        return True

    def _plan_unused(self, sku: str, runs: list[tuple[str, str]], loop: ControlLoop) -> list[dict[str, Any]]:
        """A SKU with runs registered but no utilization in the lookback: each region its runs are registered in
        (registration asks for a reserved pool there) is planned from 28 days of zeros, so only the runs can ask
        for a reservation."""
        entries: list[dict[str, Any]] = []
        for region in sorted({r for _, r in runs}):
            entry: dict[str, Any] = {"sku": sku, "region": region, "region_reason": "planned_runs_region",
                                     "created": []}  # fmt: skip
            if not self._commit_into(entry, loop):  # e.g. its reserved pool was removed since: said, not dropped
                entry["planned_runs_not_read"] = sorted(rid for rid, r in runs if r == region)
            entries.append(entry)
        return entries

    def _planned_runs(self, now_s: int) -> dict[str, list[tuple[str, str]]]:
        """Registered runs to come (:func:`~gpufleet.service.planned_runs.to_come`), as ``(id, region)`` by SKU."""
        today_s = now_s // DAY_S * DAY_S
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                select(PlannedRunRow.sku_id, PlannedRunRow.id, PlannedRunRow.region_id).where(to_come(today_s))
            ).all()
        out: dict[str, list[tuple[str, str]]] = {}
        for sku, rid, region in rows:
            out.setdefault(sku, []).append((rid, region))
        return out

    def _clusters(self) -> list[str]:
        with UnitOfWork(self._engine, write=False) as uow:
            return list(uow.session.scalars(select(ClusterRow.id).order_by(ClusterRow.id)).all())
