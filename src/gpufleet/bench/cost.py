"""``gpufleet bench cost``: metering a month of 5-minute per-GPU samples for a 10,000-GPU fleet.

The fleet is synthetic and seeded: 8-GPU nodes in three pools (reserved, on-demand, spot) run back-to-back jobs
of random length with gaps; every allocated GPU reports one utilization sample per bucket (as DCGM does). The
timed part is what a billing run does: meter every sample (columnar, ``np.bincount``), allocate the window's cost
exactly over pools, allocations and idle, and build chargeback reports with CSV for four labels. The baseline is
the straightforward loop a first version would write (one Python iteration per sample record), timed on a subset
in the same run and scaled linearly; its sums are checked against the columnar ones on that subset.
"""

from __future__ import annotations

import os
import platform
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.chargeback import chargeback
from gpufleet.cost.idle import detect_idle
from gpufleet.cost.meter import meter_usage
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, DistributionRule, UsageColumns
from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import price_to_uusd, units_to_cents
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import Priority, Workload, WorkloadKind

GPUS_PER_NODE = 8
TEAMS = 40
TENANTS_PER_TEAM = 3
FEATURES = 25


@dataclass(frozen=True, slots=True)
class SyntheticFleet:
    capacity: list[CapacityBlock]
    allocations: list[AllocationSpan]
    usage: UsageColumns
    t0_s: int
    t1_s: int


def _pool_of(node: int, n_nodes: int) -> tuple[str, Tier, str]:
    """60 % of nodes reserved, 30 % on-demand, 10 % spot."""
    if node < 0.6 * n_nodes:
        return "aws/us-east-1/h100_80gb/reserved", Tier.RESERVED, "reserved_1y"
    if node < 0.9 * n_nodes:
        return "aws/us-east-1/h100_80gb/on_demand", Tier.ON_DEMAND, "on_demand"
    return "nebius/eu-north1/h100_80gb/spot", Tier.SPOT, "spot"


def make_fleet(gpus: int, days: int, step_s: int, seed: int) -> SyntheticFleet:
    """Build the seeded synthetic fleet (not timed as metering)."""
    if gpus % GPUS_PER_NODE:
        raise ValidationError("gpus", f"must be a multiple of {GPUS_PER_NODE}")
    rng = np.random.default_rng(seed)
    n_nodes = gpus // GPUS_PER_NODE
    n_buckets = days * 86_400 // step_s
    t0 = 1_767_225_600  # 2026-01-01T00:00Z
    t1 = t0 + n_buckets * step_s
    price = PRICES_BY_SKU["h100_80gb"]
    capacity: dict[str, CapacityBlock] = {}
    allocations: list[AllocationSpan] = []
    cap = gpus * n_buckets
    b_col = np.empty(cap, dtype=np.int32)
    a_col = np.empty(cap, dtype=np.int32)
    u_col = np.empty(cap, dtype=np.float32)
    fill = 0
    node_gpus: dict[str, int] = defaultdict(int)
    for node in range(n_nodes):
        pool_id, tier, price_key = _pool_of(node, n_nodes)
        node_gpus[pool_id] += GPUS_PER_NODE
        capacity[pool_id] = CapacityBlock(
            pool_id, pool_id, tier, "h100_80gb", node_gpus[pool_id], t0, t1, price_to_uusd(getattr(price, price_key))
        )
        owner = np.full(n_buckets, -1, dtype=np.int32)
        base = np.zeros(n_buckets, dtype=np.float32)
        k = int(rng.integers(0, 24))  # first job starts within two hours
        while k < n_buckets:
            length = int(rng.exponential(2 * 86_400 / step_s)) + 1
            end = min(k + length, n_buckets)
            j = len(allocations)
            team = int(rng.integers(0, TEAMS))
            allocations.append(
                AllocationSpan(
                    f"alloc-{j}", f"job-{j}", f"team-{team}", f"tenant-{team}-{int(rng.integers(0, TENANTS_PER_TEAM))}",
                    f"ns-{team}", f"feature-{int(rng.integers(0, FEATURES))}", pool_id, "h100_80gb",
                    GPUS_PER_NODE * PARTS_PER_GPU, t0 + k * step_s, t0 + end * step_s,
                )
            )  # fmt: skip
            owner[k:end] = j
            # one job in ten holds its GPUs near-idle (a stuck job or a forgotten notebook)
            base[k:end] = rng.beta(2.0, 2.0) if rng.random() >= 0.1 else 0.01
            k = end + int(rng.exponential(6 * 3600 / step_s))  # gap: the node sits idle
        # every GPU reports every bucket, held or not (as dcgm-exporter does); unheld devices carry alloc -1
        buckets = np.arange(n_buckets, dtype=np.int32)
        n = n_buckets
        for _ in range(GPUS_PER_NODE):
            b_col[fill : fill + n] = buckets
            a_col[fill : fill + n] = owner
            noise = rng.standard_normal(n, dtype=np.float32) * (np.float32(0.1) * base + np.float32(0.002))
            u_col[fill : fill + n] = np.clip(base + noise, 0.0, 1.0)
            fill += n
    usage = UsageColumns(t0, step_s, b_col[:fill], a_col[:fill], u_col[:fill])
    return SyntheticFleet(list(capacity.values()), allocations, usage, t0, t1)


def _meter_and_charge(fleet: SyntheticFleet) -> dict[str, Any]:
    per_sample_parts = np.full(len(fleet.allocations), PARTS_PER_GPU, dtype=np.int64)  # one sample = one GPU
    t0 = time.perf_counter()
    totals = meter_usage(fleet.usage, per_sample_parts, fleet.t0_s, fleet.t1_s)
    t1 = time.perf_counter()
    result = allocate_costs(
        fleet.capacity, fleet.allocations, fleet.t0_s, fleet.t1_s,
        idle_rule=DistributionRule.PROPORTIONAL, shared_rule=DistributionRule.PROPORTIONAL,
    )  # fmt: skip
    t2 = time.perf_counter()
    csv_bytes = 0
    for dim in ("team", "tenant", "feature", "namespace"):
        csv_bytes += len(chargeback(result, fleet.allocations, dim, totals).to_csv())
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
    fleet = make_fleet(gpus, days, step_s, seed)
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
    findings = detect_idle(fleet.usage, fleet.allocations, workloads, fleet.t1_s)
    idle_s = time.perf_counter() - i0

    m = min(baseline_samples, n)
    us = fleet.usage
    n0 = time.perf_counter()
    naive_alloc, _ = naive_meter(us.bucket_idx[:m], us.alloc_idx[:m], us.util[:m], fleet.allocations, step_s)
    naive_s = time.perf_counter() - n0
    # the same sums by the columnar path on the subset: the two must agree
    sub = UsageColumns(us.origin_s, step_s, us.bucket_idx[:m], us.alloc_idx[:m], us.util[:m])
    sub_totals = meter_usage(sub, np.full(len(fleet.allocations), PARTS_PER_GPU, dtype=np.int64))
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
