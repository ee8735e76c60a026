"""``gpufleet bench k8s``: binding throughput through a real API server, next to in-process decisions/s.

Set-up (not timed): a real kube-apiserver + etcd (started from ../shared/k8s unless a kubeconfig is given),
``nodes`` simulated 8-GPU nodes registered by the fake kubelet, ``pods`` pending pods with
``schedulerName: gpufleet-bench`` (seeded mix: 70 % 1 GPU, 15 % half a GPU, 8 % 2, 5 % 4, 2 % 8 GPUs).
Timed: the controller's first tick (its pooled HTTPS connections opened beforehand, as in a running controller), from the observation to the last Binding answered; ``binds_per_s`` =
binds applied / that wall time; ``p50_ms``/``p99_ms`` = per-Binding request latency. In-process: the same
planner deciding the same observation without the API server (decisions/s, planning only).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.localcluster import LocalCluster, start_local_cluster
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.control.binding import BindingPlanner

SHAPES = ((1, 1000, 0.70), (1, 500, 0.15), (2, 1000, 0.08), (4, 1000, 0.05), (8, 1000, 0.02))
SCHED = "gpufleet-bench"


@dataclass(frozen=True, slots=True)
class K8sBenchResult:
    nodes: int
    pods: int
    bind_workers: int
    binds: int
    binds_per_s: float
    p50_ms: float
    p99_ms: float
    tick_wall_s: float
    plan_s: float
    in_process_decisions_per_s: float
    setup_s: float
    api_server: str


def _pod(i: int, num: int, milli: int) -> dict[str, object]:
    res = {"cpu": "4", "memory": "16Gi"}
    ann = {}
    lim = {}
    if milli == 1000:
        res["nvidia.com/gpu"] = lim["nvidia.com/gpu"] = str(num)
    else:
        ann["gpufleet.io/gpu-milli"] = str(milli)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"b-{i:05d}", "annotations": ann},
            "spec": {"schedulerName": SCHED, "containers": [{"name": "m", "image": "x", "resources": {"requests": res, "limits": lim}}]}}  # fmt: skip


def run_k8s_bench(
    n_nodes: int, n_pods: int, *, kubeconfig: Path | None, apiserver_xz: Path, seed: int = 7, bind_workers: int = 16
) -> K8sBenchResult:
    t_setup = time.perf_counter()
    cluster: LocalCluster | None = None
    if kubeconfig is None:
        cluster = start_local_cluster(apiserver_xz)
        kubeconfig = cluster.kubeconfig
    kube = Kube.from_kubeconfig(str(kubeconfig), pool_size=bind_workers + 8)
    try:
        ns = f"bench-{int(time.time())}"
        kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        kubelet = FakeKubelet(kube)
        nodes = [FakeNode(f"{ns}-n{i:05d}", cpu="192", memory="2048Gi") for i in range(n_nodes)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda n: kubelet.register([n]), nodes))
            rng = np.random.default_rng(seed)
            idx = rng.choice(len(SHAPES), size=n_pods, p=[s[2] for s in SHAPES])
            bodies = [_pod(i, SHAPES[k][0], SHAPES[k][1]) for i, k in enumerate(idx)]
            list(pool.map(lambda b: kube.post(f"/api/v1/namespaces/{ns}/pods", b), bodies))
        cfg = ControllerConfig(scheduler_name=SCHED, namespace=ns, bind_workers=bind_workers)
        ctl = Controller(kube, cfg).start()
        setup_s = time.perf_counter() - t_setup
        obs = ctl.view.observation()
        t0 = time.perf_counter()
        BindingPlanner(scheduler_name=SCHED).plan(obs)  # in-process: the same decisions, no API server
        plan_s = time.perf_counter() - t0
        ctl.elector.try_acquire_or_renew()
        with ThreadPoolExecutor(bind_workers) as warm:  # open the pooled connections (a running controller has)
            list(warm.map(lambda _: kube.get("/version"), range(bind_workers * 2)))
        t1 = time.perf_counter()
        plan = ctl.tick()
        tick_s = time.perf_counter() - t1
        ctl.stop()
        ctl._pool.shutdown(wait=True)
        ctl.view.stop()
        lat = sorted(ctl.bind_latency_s)
        binds = len(ctl.bound)
        decided = len(plan.binds) + len(plan.unschedulable)
        return K8sBenchResult(
            nodes=n_nodes,
            pods=n_pods,
            bind_workers=bind_workers,
            binds=binds,
            binds_per_s=round(binds / tick_s, 1),
            p50_ms=round(1000 * statistics.median(lat), 2) if lat else 0.0,
            p99_ms=round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2) if lat else 0.0,
            tick_wall_s=round(tick_s, 3),
            plan_s=round(plan_s, 3),
            in_process_decisions_per_s=round(decided / plan_s, 1) if plan_s > 0 else 0.0,
            setup_s=round(setup_s, 1),
            api_server=kube.get("/version").get("gitVersion", "?"),
        )
    finally:
        kube.close()
        if cluster is not None:
            cluster.stop()
