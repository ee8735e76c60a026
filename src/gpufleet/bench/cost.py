"""``gpufleet bench cost``: metering a month of 5-minute per-GPU samples for a 10,000-GPU fleet.

The fleet is synthetic and seeded: 8-GPU nodes in three pools (reserved, on-demand, spot) run back-to-back jobs
of random length with gaps; every allocated GPU reports one utilization sample per bucket (as DCGM does). The
timed part is what a billing run does, through the control loop's one metering object
(:class:`gpufleet.control.metering.Meter`, the one the service's FinOps books run): meter every sample (columnar, ``np.bincount``), allocate the window's cost
exactly over pools, allocations and idle, and build chargeback reports with CSV for four labels. The baseline is
the straightforward loop a first version would write (one Python iteration per sample record), timed on a subset
in the same run and scaled linearly; its sums are checked against the columnar ones on that subset.
"""

from __future__ import annotations

import os
import platform
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.control.metering import PARTS_PER_GPU, AllocationSpan, DistributionRule, Meter, UsageColumns
from gpufleet.cost.synthetic import SyntheticFleet, make_fleet
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.money import units_to_cents
from gpufleet.domain.workloads import Priority, Workload, WorkloadKind


def _meter(idle_rule: DistributionRule = DistributionRule.PROPORTIONAL) -> Meter:
    """The control loop's one metering object (the service's FinOps books and the simulator's ledger run it)."""
    return Meter(idle_rule=idle_rule, shared_rule=DistributionRule.PROPORTIONAL)


def _meter_and_charge(fleet: SyntheticFleet) -> dict[str, Any]:
    meter = _meter()
    per_sample_parts = np.full(len(fleet.allocations), PARTS_PER_GPU, dtype=np.int64)  # one sample = one GPU
    t0 = time.perf_counter()
    totals = meter.usage(fleet.usage, per_sample_parts, fleet.t0_s, fleet.t1_s)
    t1 = time.perf_counter()
    result = meter.allocate(fleet.capacity, fleet.allocations, fleet.t0_s, fleet.t1_s)
    t2 = time.perf_counter()
    csv_bytes = 0
    for dim in ("team", "tenant", "feature", "namespace"):
        csv_bytes += len(meter.chargeback(result, fleet.allocations, dim, totals).to_csv())
    t3 = time.perf_counter()
    return {
        "meter_s": round(t1 - t0, 2),
        "allocate_s": round(t2 - t1, 2),
        "reports_s": round(t3 - t2, 2),
        "used_gpu_h": float(totals.used_gpu_s.sum() / 3600),
        "sampled_gpu_h": float(totals.sampled_gpu_s.sum() / 3600),
        "fleet_usd": str(units_to_cents(result.fleet_units)),
        "idle_usd": str(units_to_cents(result.idle_units)),
        "unattributed_samples": totals.unattributed_samples,
        "conserved": result.conserved,
        "csv_bytes": csv_bytes,
        "used_by_alloc": totals.used_gpu_s,
    }


def naive_meter(
    b: npt.NDArray[np.int32], a: npt.NDArray[np.int32], u: npt.NDArray[np.float32], allocations: list[AllocationSpan],
    step_s: int,
) -> tuple[dict[int, float], dict[str, float]]:  # fmt: skip
    """The baseline: one Python iteration per sample record, summing GPU-seconds per allocation and per team."""
    records = list(zip(b.tolist(), a.tolist(), u.tolist(), strict=True))
    by_alloc: dict[int, float] = defaultdict(float)
    by_team: dict[str, float] = defaultdict(float)
    for _bucket, alloc, util in records:
        if alloc < 0:  # a device no allocation held: idle capacity, charged to nobody
            continue
        used = min(max(util, 0.0), 1.0) * step_s
        by_alloc[alloc] += used
        by_team[allocations[alloc].team_id] += used
    return by_alloc, by_team


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"


def bench_cost(gpus: int = 10_000, days: int = 30, step_s: int = 300, seed: int = 0,
               baseline_samples: int = 2_000_000) -> dict[str, Any]:  # fmt: skip
    """Generate, then time the columnar billing run on all samples and the naive loop on a subset."""
    g0 = time.perf_counter()
    fleet = make_fleet(gpus, days, step_s, seed, prices=BUILTIN_PRICE_CATALOG)
    gen_s = time.perf_counter() - g0
    n = len(fleet.usage)

    c0 = time.perf_counter()
    out = _meter_and_charge(fleet)
    columnar_s = time.perf_counter() - c0

    workloads = {
        a.workload_id: Workload(a.workload_id, a.workload_id, WorkloadKind.TRAINING, a.team_id, a.tenant_id,
                                Priority.NORMAL, ("h100_80gb",), 8, checkpoint_interval_s=1800)
        for a in fleet.allocations
    }  # fmt: skip
    i0 = time.perf_counter()
    findings = _meter().idle(fleet.usage, fleet.allocations, workloads, fleet.t1_s)
    idle_s = time.perf_counter() - i0

    m = min(baseline_samples, n)
    us = fleet.usage
    n0 = time.perf_counter()
    naive_alloc, _ = naive_meter(us.bucket_idx[:m], us.alloc_idx[:m], us.util[:m], fleet.allocations, step_s)
    naive_s = time.perf_counter() - n0
    # the same sums by the columnar path on the subset: the two must agree
    sub = UsageColumns(us.origin_s, step_s, us.bucket_idx[:m], us.alloc_idx[:m], us.util[:m])
    sub_totals = _meter().usage(sub, np.full(len(fleet.allocations), PARTS_PER_GPU, dtype=np.int64))
    keys = np.fromiter(naive_alloc.keys(), dtype=np.int64)
    vals = np.fromiter(naive_alloc.values(), dtype=np.float64)
    agree = bool(np.allclose(sub_totals.used_gpu_s[keys], vals, rtol=1e-9, atol=1e-6))

    naive_full_s = naive_s * n / m
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "gpus": gpus,
        "days": days,
        "step_s": step_s,
        "samples": n,
        "allocations": len(fleet.allocations),
        "generate_s": round(gen_s, 2),
        "columnar_s": round(columnar_s, 2),
        "columnar_samples_per_s": round(n / columnar_s),
        "idle_detect_s": round(idle_s, 2),
        "idle_findings": len(findings),
        "naive_subset_samples": m,
        "naive_subset_s": round(naive_s, 2),
        "naive_samples_per_s": round(m / naive_s),
        "naive_extrapolated_s": round(naive_full_s, 1),
        "speedup": round(naive_full_s / columnar_s, 1),
        "naive_matches_columnar": agree,
        "under_60_s": columnar_s < 60.0,
        **{k: v for k, v in out.items() if k != "used_by_alloc"},
    }
