"""The metering stage: one :class:`Meter` for every world.

What a world runs on it:

- per segment (the simulator): :meth:`Meter.charge` records GPUs held for seconds at a price on the exact
  ledger (:class:`gpufleet.cost.metering.Ledger`, integer ledger units by team, tenant, tier and workload);
- per window (the service's FinOps books, ``gpufleet cost``, ``gpufleet bench cost``): :meth:`Meter.books`
  attributes utilization records to reservations and pay-per-use pools (:func:`gpufleet.cost.books.build_books`),
  :meth:`Meter.usage` meters samples columnar (:func:`gpufleet.cost.meter.meter_usage`), :meth:`Meter.allocate`
  splits each pool's cost exactly over the allocations that held it and idle (:func:`gpufleet.cost.allocate
  .allocate_costs`), :meth:`Meter.chargeback` groups the lines by a label, :meth:`Meter.idle` finds idle
  allocations; :meth:`Meter.window` runs all of it (plus rightsizing and the hourly forecast vs actual) on one
  window of stored data.

Both books are integer ledger units priced with :func:`gpufleet.domain.money.charge_units`, so
``allocated + idle == fleet cost`` holds to the unit in either. No clock, no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.control.costing import rightsize
from gpufleet.cost.allocate import CostAllocation, CostLine, allocate_costs
from gpufleet.cost.books import Books, ReservedBlock, UtilRec, WorkloadInfo, build_books, workload_columns
from gpufleet.cost.chargeback import ChargebackReport, chargeback
from gpufleet.cost.idle import IdleFinding, detect_idle
from gpufleet.cost.meter import UsageTotals, meter_usage
from gpufleet.cost.metering import Ledger
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, DistributionRule, UsageColumns
from gpufleet.cost.prices import PriceHistory
from gpufleet.cost.rightsizing import Recommendation, ResourceSpec
from gpufleet.cost.workload_cost import WorkloadCost, workload_cost
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import Workload

__all__ = [
    "PARTS_PER_GPU",
    "AllocationSpan",
    "CapacityBlock",
    "CostAllocation",
    "CostLine",
    "DailyUsage",
    "DistributionRule",
    "FinOpsSnapshot",
    "ForecastSeries",
    "IdleFinding",
    "Ledger",
    "Meter",
    "MeterInputs",
    "PriceHistory",
    "ReservedBlock",
    "UsageColumns",
    "UsageTotals",
    "UtilRec",
    "WorkloadInfo",
]

DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """GPU-hours per day: ``capacity`` is the fleet's (only shown fleet-wide), the others per scope; ``unmeasured``:
    allocated GPU-hours whose utilization was not measured (neither in ``used`` nor idle)."""

    day_start_s: list[int]
    capacity_gpu_h: list[float]
    allocated_gpu_h: list[float]
    used_gpu_h: list[float]
    unmeasured_gpu_h: list[float]


@dataclass(frozen=True, slots=True)
class ForecastSeries:
    """GPUs held per hour: a forecast (``method``) against what was held."""

    method: str
    t_s: list[int]
    forecast_gpus: list[float]
    actual_gpus: list[float]


@dataclass(frozen=True, slots=True)
class FinOpsSnapshot:
    """The books of one window (the dashboard's :class:`gpufleet.web.data.CostDashboardData` is a view of one).
    ``usage`` is aligned with ``allocations``; ``daily`` and ``forecasts`` are keyed by team id, ``"*"`` for the
    fleet; ``capacity`` holds the capacity blocks shown as reservations."""

    result: CostAllocation
    allocations: list[AllocationSpan]
    usage: UsageTotals
    now_s: int
    capacity: list[CapacityBlock]
    daily: dict[str, DailyUsage]
    forecasts: dict[str, ForecastSeries]
    idle: list[IdleFinding]
    recommendations: list[Recommendation]


@dataclass(frozen=True, slots=True)
class MeterInputs:
    """What a world measured for a window: utilization records (the window and the day before it), the
    registered workloads (labels, the domain's view for idle detection, the current spec for rightsizing),
    paid reservations, each SKU's on-demand (pool, price) and each pool's (tier, price), and, where a world keeps
    them, the pools' past prices (the books charge each hour at the price of its moment; idle findings, which are
    about what to change now, are priced at the current prices)."""

    recs: list[UtilRec]
    workloads: dict[str, WorkloadInfo]
    domain_workloads: dict[str, Workload]
    specs: dict[str, ResourceSpec]
    reservations: list[ReservedBlock]
    on_demand: dict[str, tuple[str, int]]
    pools: dict[str, tuple[Tier, int]]
    history: PriceHistory | None = None


@dataclass(slots=True)
class Meter:
    """See the module docstring. ``idle_rule`` / ``shared_rule``: how idle and shared cost are distributed."""

    idle_rule: DistributionRule = DistributionRule.SEPARATE_LINE
    shared_rule: DistributionRule = DistributionRule.PROPORTIONAL
    ledger: Ledger = field(default_factory=Ledger)

    # ---- per segment ----------------------------------------------------------------------------------------------
    def charge(
        self, *, team: str, tenant: str, workload: str, tier: str, price_uusd: int, gpus: int, seconds: int
    ) -> int:
        """Record ``gpus`` GPUs held for ``seconds`` at ``price_uusd`` per GPU-hour; returns the ledger units."""
        return self.ledger.charge(
            team=team, tenant=tenant, workload=workload, tier=tier, price_uusd=price_uusd, gpus=gpus, seconds=seconds
        )

    @staticmethod
    def held_units(gpu_s: float, price_uusd_per_gpu_h: int) -> int:
        """Ledger units of ``gpu_s`` GPU-seconds held (fractional GPUs allowed: summed utilization records) at a
        price per GPU-hour: :func:`gpufleet.domain.money.charge_units` for whole GPUs, rounded to the unit."""
        return round(float(gpu_s) * int(price_uusd_per_gpu_h))

    # ---- per window -----------------------------------------------------------------------------------------------
    @staticmethod
    def books(
        recs: Sequence[UtilRec],
        workloads: Mapping[str, WorkloadInfo],
        reservations: Sequence[ReservedBlock],
        on_demand: Mapping[str, tuple[str, int]],
        t0_s: int,
        t1_s: int,
        pools: Mapping[str, tuple[Tier, int]] | None = None,
        history: PriceHistory | None = None,
    ) -> Books:
        return build_books(recs, workloads, reservations, on_demand, t0_s, t1_s, pools, history)

    @staticmethod
    def usage(
        columns: UsageColumns, parts: npt.NDArray[np.int64], t0_s: int | None = None, t1_s: int | None = None
    ) -> UsageTotals:
        return meter_usage(columns, parts, t0_s, t1_s)

    def allocate(
        self, capacity: Sequence[CapacityBlock], allocations: Sequence[AllocationSpan], t0_s: int, t1_s: int
    ) -> CostAllocation:
        return allocate_costs(capacity, allocations, t0_s, t1_s, idle_rule=self.idle_rule, shared_rule=self.shared_rule)

    @staticmethod
    def chargeback(
        result: CostAllocation, allocations: Sequence[AllocationSpan], dim: str, usage: UsageTotals | None = None
    ) -> ChargebackReport:
        return chargeback(result, allocations, dim, usage)

    @staticmethod
    def idle(
        usage: UsageColumns,
        allocations: Sequence[AllocationSpan],
        workloads: Mapping[str, Workload],
        now_s: int,
        *,
        price_uusd_by_pool: Mapping[str, int] | None = None,
    ) -> list[IdleFinding]:
        return detect_idle(usage, allocations, workloads, now_s, price_uusd_by_pool=price_uusd_by_pool)

    @staticmethod
    def workload_cost(
        workload_id: str,
        result: CostAllocation,
        allocations: Sequence[AllocationSpan],
        usage: UsageTotals | None = None,
        recommendations: Sequence[Recommendation] = (),
    ) -> WorkloadCost:
        return workload_cost(workload_id, result, allocations, usage, recommendations)

    def window(self, ld: MeterInputs, t0_s: int, t1_s: int) -> FinOpsSnapshot:
        """The books of [t0_s, t1_s): allocation (idle and shared by this meter's rules), daily capacity and use,
        the hourly seasonal-naive forecast vs actual, idle findings (one allocation per registered workload,
        holding its peak GPUs) and rightsizing recommendations."""
        in_window = [r for r in ld.recs if r.start_s + r.bucket_s > t0_s]  # a bucket begun before t0 is clipped
        books = self.books(in_window, ld.workloads, ld.reservations, ld.on_demand, t0_s, t1_s, ld.pools, ld.history)
        result = self.allocate(books.capacity, books.allocations, t0_s, t1_s)
        teams = sorted({r.team_id for r in ld.recs})
        daily = {"*": _daily(ld, in_window, None, t0_s, t1_s)} | {
            t: _daily(ld, in_window, t, t0_s, t1_s) for t in teams
        }
        forecasts = {k: f for k, f in ((t, _forecast(ld.recs, t, t0_s, t1_s)) for t in ["*", *teams]) if f}
        first: dict[str, AllocationSpan] = {}
        for a in books.allocations:
            first.setdefault(a.workload_id, a)
        peak: dict[str, float] = defaultdict(float)
        for r in in_window:
            peak[r.workload_id] = max(peak[r.workload_id], r.gpus)
        wl_ids = sorted(w for w in first if w in ld.domain_workloads)
        spans = [
            AllocationSpan(w, w, a.team_id, a.tenant_id, a.namespace, a.feature, a.pool_id, a.sku_id,
                           max(1, round(peak[w] * PARTS_PER_GPU)), t0_s, t1_s, serving=a.serving)
            for w, a in ((w, first[w]) for w in wl_ids)
        ]  # fmt: skip
        cols, _ = workload_columns(in_window, wl_ids, t0_s)
        prices = (
            {p: pr for p, (_t, pr) in ld.pools.items()}
            | {p: pr for p, pr in ld.on_demand.values()}
            | {b.pool_id: b.price_uusd_per_gpu_h for b in ld.reservations}
        )
        domain_wls = {w: ld.domain_workloads[w] for w in wl_ids}
        idle = self.idle(cols, spans, domain_wls, t1_s, price_uusd_by_pool=prices) if spans else []
        by_wl: dict[str, list[UtilRec]] = defaultdict(list)
        for r in ld.recs:
            by_wl[r.workload_id].append(r)
        recs = [rightsize(w, ld.specs[w], by_wl[w]) for w in wl_ids if w in ld.specs]
        return FinOpsSnapshot(result, books.allocations, books.usage, t1_s,
                              [b for b in books.capacity if b.tier is Tier.RESERVED], daily, forecasts, idle,
                              [r for r in recs if r is not None])  # fmt: skip


def _daily(ld: MeterInputs, recs: list[UtilRec], team: str | None, t0_s: int, t1_s: int) -> DailyUsage:
    days = max(1, -(-(t1_s - t0_s) // DAY_S))
    alloc = np.zeros(days)
    used = np.zeros(days)
    unmeasured = np.zeros(days)
    for r in recs:
        if team is None or r.team_id == team:
            for d, held_s in _day_parts(r.start_s, r.bucket_s, t0_s, t1_s, days):
                alloc[d] += r.gpus * held_s / 3600
                if r.util == r.util:
                    used[d] += r.gpus * r.util * held_s / 3600
                else:  # NaN: held, how busy not measured
                    unmeasured[d] += r.gpus * held_s / 3600
    cap = np.zeros(days)
    for b in ld.reservations:
        for d in range(days):
            s0, s1 = t0_s + d * DAY_S, min(t1_s, t0_s + (d + 1) * DAY_S)
            cap[d] += b.units * max(0, min(b.end_s, s1) - max(b.start_s, s0)) / 3600
    cap = np.maximum(cap, alloc) if team is None else cap  # on-demand capacity is what was used
    return DailyUsage([t0_s + d * DAY_S for d in range(days)], cap.tolist(), alloc.tolist(), used.tolist(),
                      unmeasured.tolist())  # fmt: skip


def _day_parts(start_s: int, bucket_s: int, t0_s: int, t1_s: int, days: int) -> list[tuple[int, int]]:
    """The days of the window a bucket falls in, each with its seconds there (the bucket clipped to [t0_s, t1_s)):
    ``[(day, bucket_s)]`` for a bucket inside one day of the window, as before."""
    d = (start_s - t0_s) // DAY_S
    if start_s >= t0_s and start_s + bucket_s <= min(t1_s, t0_s + (d + 1) * DAY_S):
        return [(d, bucket_s)]
    s0, s1 = max(start_s, t0_s), min(start_s + bucket_s, t1_s)
    out = []
    for day in range(max(0, (s0 - t0_s) // DAY_S), min(days, -(-(s1 - t0_s) // DAY_S))):
        part = min(s1, t0_s + (day + 1) * DAY_S) - max(s0, t0_s + day * DAY_S)
        if part > 0:
            out.append((day, part))
    return out


def _forecast(recs: list[UtilRec], team: str, t0_s: int, t1_s: int) -> ForecastSeries | None:
    """Seasonal naive (same hour yesterday) vs actual GPUs held per hour; None without a day of history. A record
    counts in every hour its bucket covers, for the seconds it covers there (a 2-hour or a daily bucket too)."""
    hours = (t1_s - t0_s) // 3600
    held: dict[int, float] = defaultdict(float)
    for r in recs:
        if team in ("*", r.team_id):
            s0, s1 = r.start_s - t0_s, r.start_s - t0_s + r.bucket_s
            for h in range(s0 // 3600, -(-s1 // 3600)):
                held[h] += r.gpus * (min(s1, (h + 1) * 3600) - max(s0, h * 3600)) / 3600
    if not held or min(held) > hours - 24 - 1:
        return None
    first = max(min(held) + 24, 0)
    ts = list(range(first, hours))
    if len(ts) < 2:
        return None
    return ForecastSeries("seasonal naive (same hour yesterday)", [t0_s + h * 3600 for h in ts],
                          [held.get(h - 24, 0.0) for h in ts], [held.get(h, 0.0) for h in ts])  # fmt: skip
