"""Where the service plans each SKU, read from the store and decided by
:func:`gpufleet.control.proposing.plan_regions`, and the use each plan reads.

Reservations are regional. A utilization record that names a pool is attributed to the pool's region; one that
names no pool (or a pool not stored) is not. Each region with a reserved pool where the SKU ran or where runs are
registered is planned on its own records; the SKU's main region on the rest. So a fleet split across regions is
bought where it runs, and no record is read by two plans (it would be bought twice). The reconciler's pass and
``POST /v1/plans:propose`` read the same map, so both decide the same orders for a SKU-region.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session

from gpufleet.adapters.sql.models import PlannedRunRow, PoolRow, ReservationRow, UtilizationRow
from gpufleet.control.proposing import PlanRegion, plan_regions
from gpufleet.domain.pools import Tier
from gpufleet.service.planned_runs import to_come

DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class PlanMap:
    """``measured``: the SKUs with use in the lookback; ``regions``: where each SKU (measured, or with runs to
    come) is planned, main region first (empty: nowhere, e.g. no reserved pool); ``runs``: the runs to come, as
    ``(id, region)`` by SKU; ``reserved``: the regions with a reserved pool, by SKU; ``used_gpu_s``: the SKU's
    GPU-seconds in the lookback attributed to each region (records naming a stored pool there);
    ``total_gpu_s``: all of them."""

    measured: tuple[str, ...]
    regions: dict[str, tuple[PlanRegion, ...]]
    runs: dict[str, list[tuple[str, str]]]
    reserved: dict[str, list[str]]
    used_gpu_s: dict[str, dict[str, float]]
    total_gpu_s: dict[str, float]

    def not_read(self, sku: str) -> list[str]:
        """The SKU's runs to come in a region no plan of it reads (no reserved pool there), by id."""
        planned = {p.region for p in self.regions.get(sku, ())}
        return sorted(rid for rid, region in self.runs.get(sku, []) if region not in planned)


def read_plan_map(
    session: Session, today_s: int, lookback_days: int, held_statuses: Sequence[str], skus: Sequence[str] | None = None
) -> PlanMap:
    """The plan map of the day starting ``today_s`` (use of the ``lookback_days`` before it; runs starting after it;
    reservations in ``held_statuses``), for every SKU or only ``skus``."""
    window = (UtilizationRow.bucket_start_s >= today_s - lookback_days * DAY_S, UtilizationRow.bucket_start_s < today_s)

    def only(col: InstrumentedAttribute[str]) -> ColumnElement[bool]:
        return true() if skus is None else col.in_(list(skus))

    s = session
    summed = func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s)
    totals = s.execute(
        select(UtilizationRow.sku_id, summed)
        .where(*window, only(UtilizationRow.sku_id))
        .group_by(UtilizationRow.sku_id)
    ).all()
    total = {sku: float(v or 0) for sku, v in totals}
    measured = sorted(total)
    by_region = s.execute(
        select(UtilizationRow.sku_id, PoolRow.region_id, summed)
        .join(PoolRow, PoolRow.id == UtilizationRow.pool_id)
        .where(*window, only(UtilizationRow.sku_id))
        .group_by(UtilizationRow.sku_id, PoolRow.region_id)
    ).all()  # fmt: skip
    reserved_rows = s.execute(
        select(PoolRow.sku_id, PoolRow.region_id).where(PoolRow.tier == Tier.RESERVED.value, only(PoolRow.sku_id))
    ).all()
    held_rows = s.execute(
        select(ReservationRow.sku_id, ReservationRow.region_id, func.sum(ReservationRow.units))
        .where(ReservationRow.status.in_(list(held_statuses)), only(ReservationRow.sku_id))
        .group_by(ReservationRow.sku_id, ReservationRow.region_id)
    ).all()
    run_rows = s.execute(
        select(PlannedRunRow.sku_id, PlannedRunRow.id, PlannedRunRow.region_id)
        .where(to_come(today_s), only(PlannedRunRow.sku_id))
        .order_by(PlannedRunRow.sku_id, PlannedRunRow.id)
    ).all()
    used: dict[str, dict[str, float]] = {}
    for sku, region, gpu_s in by_region:
        used.setdefault(sku, {})[region] = float(gpu_s or 0)
    reserved: dict[str, list[str]] = {}
    for sku, region in reserved_rows:
        reserved.setdefault(sku, []).append(region)
    held: dict[str, dict[str, int]] = {}
    for sku, region, units in held_rows:
        held.setdefault(sku, {})[region] = int(units or 0)
    runs: dict[str, list[tuple[str, str]]] = {}
    for sku, rid, region in run_rows:
        runs.setdefault(sku, []).append((rid, region))
    is_measured = set(measured)
    regions = {
        sku: plan_regions(
            sku in is_measured, used.get(sku, {}), reserved.get(sku, []), held.get(sku, {}),
            [region for _, region in runs.get(sku, [])],
        )
        for sku in sorted(is_measured | set(runs))
    }  # fmt: skip
    return PlanMap(tuple(measured), regions, runs, reserved, used, total)


def scoped(stmt: Select, plan: PlanRegion | None) -> Select:  # type: ignore[type-arg]
    """``stmt`` (over utilization records) restricted to the records ``plan`` reads (None: every record)."""
    if plan is None or not (plan.own_only or plan.excluded):
        return stmt
    pools = select(PoolRow.id).where(PoolRow.region_id.in_([plan.region] if plan.own_only else list(plan.excluded)))
    if plan.own_only:
        return stmt.where(UtilizationRow.pool_id.in_(pools))
    return stmt.where(or_(UtilizationRow.pool_id.is_(None), UtilizationRow.pool_id.not_in(pools)))


def pools_read(plan: PlanRegion) -> ColumnElement[bool]:
    """The pools (rows of ``pools``) in the regions ``plan`` reads: its quotas."""
    if plan.own_only:
        return PoolRow.region_id == plan.region
    return PoolRow.region_id.not_in(list(plan.excluded)) if plan.excluded else true()


def plan_view(m: PlanMap) -> list[dict[str, Any]]:
    """The map as ``GET /v1/plans/regions`` shows it: per SKU, where it is planned and why, which records each plan
    reads, the runs each plan reads and those none reads, and how much of its use names a region (the rest is
    planned in its main region)."""
    out = []
    for sku, plans in sorted(m.regions.items()):
        used = m.used_gpu_s.get(sku, {})
        total = m.total_gpu_s.get(sku, 0.0)
        runs = m.runs.get(sku, [])
        out.append(
            {
                "sku": sku,
                "plans": [
                    {"region": p.region, "reason": p.reason, "own_region": p.own_only,
                     "excluded_regions": list(p.excluded),
                     "planned_runs": sorted(rid for rid, r in runs if r == p.region)}
                    for p in plans
                ],
                "planned_runs_not_read": m.not_read(sku),
                "used_gpu_h_by_region": {r: round(v / 3600, 3) for r, v in sorted(used.items())},
                "unattributed_gpu_h": round(max(total - sum(used.values()), 0.0) / 3600, 3),
            }
        )  # fmt: skip
    return out
