"""Scheduler throughput: decisions per second and decision latency on a large synthetic cluster.

Cluster: ``n_nodes`` 8-GPU nodes of mixed SKUs (the built-in catalog's 8-GPU SKUs, CPU and memory per
node from the SKU), 16 nodes per NVLink domain and 32 per rack. Workload: a seeded mix of fractional,
1/2/4/8-GPU and CPU-only pods, a fifth of them pinned to one or two SKUs. Pods churn: when the cluster is
above ``target_util`` a random running pod leaves, so the scheduler works on a busy, fragmented cluster
the whole time. Decisions go through the loop's scheduling stage (``FleetScheduler.place_request``, its
node-table view). Only the placement call is timed (filter + score + commit), twice: wall-clock, and the
process's CPU time (``time.process_time_ns``), which excludes time the OS gave to other processes -- on a
shared machine the wall-clock tail mostly measures the neighbours, not the scheduler.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from gpufleet.control.scheduling import FleetScheduler, Placement
from gpufleet.domain.skus import BUILTIN_SKUS
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest

_SHARES = (100, 250, 300, 500, 700, 800)


def synthetic_cluster(n_nodes: int, rng: np.random.Generator) -> list[NodeSpec]:
    skus = [s for s in BUILTIN_SKUS if s.gpus_per_node == 8]
    pick = rng.integers(len(skus), size=n_nodes)
    return [
        NodeSpec(
            name=f"node-{i:05d}",
            cpu_milli=skus[k].cpu_per_node * 1000,
            memory_mib=skus[k].mem_gb_per_node * 1024,
            gpu_count=8,
            gpu_model=skus[k].id,
            rack=i // 32,
            nvlink_domain=i // 16,
        )
        for i, k in enumerate(pick)
    ]


def synthetic_pods(n_pods: int, models: tuple[str, ...], rng: np.random.Generator) -> list[PodRequest]:
    kind = rng.choice(6, size=n_pods, p=[0.30, 0.40, 0.12, 0.08, 0.05, 0.05])
    out: list[PodRequest] = []
    for i, k in enumerate(kind):
        pin: tuple[str, ...] = ()
        if rng.random() < 0.2:
            pin = tuple(sorted({str(m) for m in rng.choice(models, size=int(rng.integers(1, 3)))}))
        if k == 0:
            milli = int(_SHARES[int(rng.integers(len(_SHARES)))])
            out.append(
                PodRequest(f"p{i}", 2000 + 1000 * int(rng.integers(6)), 8192 * int(rng.integers(1, 5)), 1, milli, pin)
            )
        elif k == 5:
            out.append(PodRequest(f"p{i}", 4000 * int(rng.integers(1, 5)), 16384, 0, 0))
        else:
            n = (1, 2, 4, 8)[k - 1]
            out.append(PodRequest(f"p{i}", n * 10000, n * 65536, n, 1000, pin))
    return out


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    policy: str
    nodes: int
    pods: int
    placed: int
    infeasible: int
    decisions_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_p50_ms: float
    cpu_p99_ms: float
    cpu_decisions_per_s: float
    mean_gpu_util_pct: float


def run_throughput(
    n_nodes: int = 10_000, n_pods: int = 100_000, seed: int = 7, policy: str = "gpufleet", target_util: float = 0.85
) -> ThroughputResult:
    rng = np.random.default_rng(seed)
    table = NodeTable.from_specs(synthetic_cluster(n_nodes, rng))
    pods = synthetic_pods(n_pods, table.models, rng)
    sched = FleetScheduler.on_table(policy, table, rng)  # the loop's scheduling stage, node-table view
    running: list[Placement] = []
    lat = np.empty(n_pods, dtype=np.float64)
    cpu = np.empty(n_pods, dtype=np.float64)
    cap = table.gpu_capacity_milli
    allocated = placed = 0
    utils: list[float] = []
    for i, req in enumerate(pods):
        c0 = time.process_time_ns()
        t0 = time.perf_counter()
        res = sched.place_request(req)
        lat[i] = time.perf_counter() - t0
        cpu[i] = (time.process_time_ns() - c0) / 1e9
        if isinstance(res, Placement):
            placed += 1
            running.append(res)
            allocated += req.total_gpu_milli
        while allocated > target_util * cap and running:
            j = int(rng.integers(len(running)))
            gone = running[j]
            running[j] = running[-1]
            running.pop()
            sched.release_request(gone)
            allocated -= gone.request.total_gpu_milli
        if i % 1000 == 0:
            utils.append(100.0 * allocated / cap)
    total_s = float(lat.sum())
    return ThroughputResult(
        policy=policy,
        nodes=n_nodes,
        pods=n_pods,
        placed=placed,
        infeasible=n_pods - placed,
        decisions_per_s=round(n_pods / total_s, 1),
        p50_ms=round(float(np.percentile(lat, 50)) * 1e3, 3),
        p99_ms=round(float(np.percentile(lat, 99)) * 1e3, 3),
        max_ms=round(float(lat.max()) * 1e3, 1),
        cpu_p50_ms=round(float(np.percentile(cpu, 50)) * 1e3, 3),
        cpu_p99_ms=round(float(np.percentile(cpu, 99)) * 1e3, 3),
        cpu_decisions_per_s=round(n_pods / float(cpu.sum()), 1),
        mean_gpu_util_pct=round(statistics.fmean(utils), 1),
    )
