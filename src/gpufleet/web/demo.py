"""A seeded demo fleet for the dashboard: the bench's synthetic fleet, metered and analysed by the cost package.

Everything shown is computed, not typed in: costs by :func:`allocate_costs`, idle by :func:`detect_idle`,
rightsizing by :func:`recommend` from each job's measured GPU utilization (CPU and memory profiles are synthetic,
the demo has no such telemetry), the forecast is seasonal-naive (same hour yesterday).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from gpufleet.control.metering import DailyUsage, FinOpsSnapshot, ForecastSeries
from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.idle import detect_idle
from gpufleet.cost.meter import meter_usage
from gpufleet.cost.model import PARTS_PER_GPU, CapacityBlock, DistributionRule
from gpufleet.cost.rightsizing import Recommendation, ResourceSpec, UsageProfile, recommend
from gpufleet.cost.synthetic import GPUS_PER_NODE, make_fleet
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import term_seconds
from gpufleet.domain.workloads import Priority, ServingScaling, Workload, WorkloadKind
from gpufleet.web.data import CostDashboardData

DAY_S = 86_400


def _split_reserved(blocks: list[CapacityBlock], t0: int) -> list[CapacityBlock]:
    """Replace the reserved pool's block by two reservations (different owners and expiries) of the same size."""
    out: list[CapacityBlock] = []
    for b in blocks:
        if b.tier is not Tier.RESERVED:
            out.append(b)
            continue
        first = (b.gpus * 6 // 10) // GPUS_PER_NODE * GPUS_PER_NODE
        out.append(CapacityBlock("res-2025-06", b.pool_id, b.tier, b.sku_id, first, t0 - 200 * DAY_S,
                                 t0 - 200 * DAY_S + term_seconds(12), b.price_uusd_per_gpu_h, "team-0"))  # fmt: skip
        out.append(CapacityBlock("res-2025-12", b.pool_id, b.tier, b.sku_id, b.gpus - first, t0 - 40 * DAY_S,
                                 t0 - 40 * DAY_S + term_seconds(3), b.price_uusd_per_gpu_h, "team-1"))  # fmt: skip
    return out


def demo_data(gpus: int = 256, days: int = 14, seed: int = 3) -> CostDashboardData:
    fleet = make_fleet(gpus, days, 300, seed, prices=BUILTIN_PRICE_CATALOG)
    capacity = _split_reserved(fleet.capacity, fleet.t0_s)
    allocs = fleet.allocations
    usage = fleet.usage
    totals = meter_usage(usage, np.full(len(allocs), PARTS_PER_GPU, dtype=np.int64))
    result = allocate_costs(capacity, allocs, fleet.t0_s, fleet.t1_s, idle_rule=DistributionRule.SEPARATE_LINE,
                            shared_rule=DistributionRule.PROPORTIONAL)  # fmt: skip

    # daily GPU-hours and hourly GPUs in use, fleet-wide and per team, from the samples
    teams = sorted({a.team_id for a in allocs})
    team_code = np.array([teams.index(a.team_id) for a in allocs], dtype=np.int64)
    held = usage.alloc_idx >= 0
    a_idx = usage.alloc_idx[held]
    hour = usage.bucket_idx[held].astype(np.int64) * usage.bucket_s // 3600
    n_hours = days * 24
    step_h = usage.bucket_s / 3600
    tc = team_code[a_idx]
    gpu_h_by_team_hour = np.bincount(tc * n_hours + hour, minlength=len(teams) * n_hours).reshape(len(teams), n_hours)
    used_by_team_hour = np.bincount(tc * n_hours + hour, weights=usage.util[held], minlength=len(teams) * n_hours)
    alloc_h = gpu_h_by_team_hour * step_h
    used_h = used_by_team_hour.reshape(len(teams), n_hours) * step_h

    def daily(rows: slice | list[int]) -> DailyUsage:
        a = alloc_h[rows].sum(axis=0).reshape(days, 24).sum(axis=1)
        u = used_h[rows].sum(axis=0).reshape(days, 24).sum(axis=1)
        return DailyUsage([fleet.t0_s + d * DAY_S for d in range(days)], [gpus * 24.0] * days, a.tolist(), u.tolist(),
                          [0.0] * days)  # fmt: skip

    def forecast(rows: slice | list[int]) -> ForecastSeries:
        gpus_in_use = alloc_h[rows].sum(axis=0)  # GPU-hours in an hour = GPUs held on average
        t = [fleet.t0_s + h * 3600 for h in range(24, n_hours)]
        return ForecastSeries(
            "seasonal naive (same hour yesterday)", t, gpus_in_use[:-24].tolist(), gpus_in_use[24:].tolist()
        )

    daily_map = {"*": daily(slice(None))} | {t: daily([i]) for i, t in enumerate(teams)}
    forecast_map = {"*": forecast(slice(None))} | {t: forecast([i]) for i, t in enumerate(teams)}

    rng = np.random.default_rng(seed)
    workloads: dict[str, Workload] = {}
    for j, a in enumerate(allocs):
        serving = j % 5 == 0
        workloads[a.workload_id] = Workload(
            a.workload_id, a.workload_id, WorkloadKind.SERVING if serving else WorkloadKind.TRAINING, a.team_id,
            a.tenant_id, Priority.CRITICAL if serving and j % 10 == 0 else Priority.NORMAL, ("h100_80gb",),
            GPUS_PER_NODE, checkpoint_interval_s=None if serving else 1800,
            scaling=ServingScaling(1, 4, 20.0) if serving else None,
        )  # fmt: skip
    prices = {c.pool_id: c.price_uusd_per_gpu_h for c in capacity}
    idle = detect_idle(usage, allocs, workloads, fleet.t1_s, price_uusd_by_pool=prices,
                       replicas={w: 2 for w in workloads})  # fmt: skip

    # rightsizing for jobs running at the end of the window, from their measured utilization
    recs: list[Recommendation] = []
    by_alloc: dict[int, list[int]] = defaultdict(list)
    running = [j for j, a in enumerate(allocs) if a.end_s == fleet.t1_s]
    want = set(running)
    sel = np.flatnonzero(np.isin(usage.alloc_idx, np.asarray(running, dtype=np.int32)))
    for i in sel.tolist():
        by_alloc[int(usage.alloc_idx[i])].append(i)
    for j in sorted(want):
        idx = np.asarray(by_alloc.get(j, []), dtype=np.int64)
        if len(idx) == 0:
            continue
        buckets = usage.bucket_idx[idx]
        util = np.bincount(buckets - buckets.min(), weights=usage.util[idx]) / np.maximum(
            np.bincount(buckets - buckets.min()), 1
        )  # mean over the node's GPUs per bucket
        n = len(util)
        gpu_mem_gb = rng.uniform(20, 70, n) * GPUS_PER_NODE
        prof = UsageProfile(rng.uniform(8, 40, n), rng.uniform(100, 600, n), util.astype(np.float64), gpu_mem_gb)
        cur = ResourceSpec(96.0, 1024.0, GPUS_PER_NODE, "h100_80gb")
        recs.append(recommend(allocs[j].workload_id, cur, prof, candidate_skus=("a100_80gb", "l40s", "h200_141gb")))
    snap = FinOpsSnapshot(result, allocs, totals, fleet.t1_s, capacity, daily_map, forecast_map, idle, recs)
    return CostDashboardData(snap)
