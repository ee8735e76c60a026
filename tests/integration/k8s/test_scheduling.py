"""gpufleet as a secondary scheduler against the real API server: openb pods, capacity, gangs, conflicts."""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.labels import pod_request
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.bench.binpack import read_openb_pods
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.scheduler import Placement, Scheduler, make_policy
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for

OPENB = Path(__file__).resolve().parents[4] / "shared" / "data" / "openb" / "openb_pod_list_default.csv"
PRODUCT = "NVIDIA-H100-80GB-HBM3"


def _cfg(ns: str, sched: str, **kw: object) -> ControllerConfig:
    return ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"lease-{sched}", **kw)  # type: ignore[arg-type]


def _openb_pods(n: int, seed: int) -> list[PodRequest]:
    if not OPENB.is_file():
        pytest.skip("../shared/data/openb is absent")
    gpu = [p for p in read_openb_pods(OPENB) if p.num_gpu > 0]
    rng = np.random.default_rng(seed)
    picked = [gpu[int(i)] for i in rng.choice(len(gpu), size=n, replace=False)]
    return [PodRequest(f"p-{i:03d}", p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for i, p in enumerate(picked)]


@pytest.mark.parametrize("n_nodes", [50, 16])
def test_200_openb_pods_match_the_in_process_scheduler(kube: Kube, kubelet: FakeKubelet, ns: str, n_nodes: int) -> None:
    """50 nodes: every pod fits; 16 nodes (128 GPUs): some do not, so the packing decides the figure."""
    prefix = f"n{uuid.uuid4().hex[:5]}"
    nodes = [FakeNode(f"{prefix}-{i:02d}", gpus=8, cpu="96", memory="768Gi") for i in range(n_nodes)]
    reqs = _openb_pods(200, seed=7)
    # the same policy in-process on the same pods in the same order (priority, creation, name)
    specs = [NodeSpec(n.name, 96_000, 768 * 1024, 8, PRODUCT) for n in sorted(nodes, key=lambda n: n.name)]
    table = NodeTable.from_specs(specs)
    s = Scheduler(table, make_policy("gpufleet", table), np.random.default_rng(0))
    expected: dict[str, str] = {}
    for r in reqs:
        got = s.place(PodRequest(f"{ns}/{r.name}", r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli))
        if isinstance(got, Placement):
            expected[r.name] = got.node_name
    assert (len(expected) == 200) == (n_nodes == 50)
    kubelet.register(nodes)
    kubelet.start()
    sched = f"gpufleet-{prefix}"
    for r in reqs:
        create_pod(kube, ns, pod_body(r.name, r, sched))

    def bound() -> list[dict[str, object]]:
        return [p for p in pods_in(kube, ns) if p["spec"].get("nodeName")]

    with running_controller(kube, _cfg(ns, sched)) as ctl:
        assert wait_for(lambda: len(bound()) >= len(expected), 90), (ctl.error, ctl.act.audit[:3])
        assert wait_for(
            lambda: ctl.last_plan is not None and len(ctl.last_plan.unschedulable) == 200 - len(expected), 30
        )
        assert wait_for(lambda: all(p["status"].get("phase") == "Running" for p in bound()), 30)
    pods = bound()
    assert len(pods_in(kube, ns)) == 200
    # no node over capacity, computed from the API objects alone
    used: dict[str, list[int]] = defaultdict(lambda: [0] * 8)
    cpu: dict[str, int] = defaultdict(int)
    placed: dict[str, str] = {}
    for p in pods:
        r = pod_request(p)  # type: ignore[arg-type]
        node = p["spec"]["nodeName"]  # type: ignore[index]
        slots = [int(x) for x in p["metadata"]["annotations"]["gpufleet.io/gpu-slots"].split(",")]  # type: ignore[index]
        assert len(slots) == r.num_gpu
        for g in slots:
            used[node][g] += r.gpu_milli
        cpu[node] += r.cpu_milli
        placed[p["metadata"]["name"]] = node  # type: ignore[index]
    assert all(m <= 1000 for row in used.values() for m in row)
    assert all(c <= 96_000 for c in cpu.values())
    k8s_unallocated = n_nodes * 8 * 1000 - sum(sum(row) for row in used.values())
    assert k8s_unallocated == int(table.gpu_left_milli.sum())
    assert placed == expected
    assert ctl.planner.unallocated_gpu_milli() == k8s_unallocated
    assert sum(1 for a in ctl.act.audit if a["action"] == "bind" and a["outcome"] == "applied") == len(expected)
    print(
        f"{n_nodes} nodes: {len(expected)}/200 bound, unallocated {k8s_unallocated / 1000:.1f} GPUs (k8s = in-process)"
    )


def test_gang_of_four_8_gpu_pods_binds_all_or_nothing(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    prefix = f"g{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{prefix}-{i}", gpus=8) for i in range(4)])
    kubelet.start()
    sched = f"gpufleet-{prefix}"
    create_pod(kube, ns, pod_body("blocker", PodRequest("b", 1000, 1024, 1, 1000), sched))
    gang = PodRequest("w", 8000, 65536, 8, 1000)
    lab = {"gpufleet.io/pod-group": "train"}
    ann = {"gpufleet.io/pod-group-min": "4"}
    with running_controller(kube, _cfg(ns, sched)) as ctl:
        assert wait_for(lambda: any(p["spec"].get("nodeName") for p in pods_in(kube, ns)), 30)
        for i in range(3):
            create_pod(kube, ns, pod_body(f"w{i}", gang, sched, labels=lab, annotations=ann))
        # three of four members: the gang waits (gang_incomplete); after the fourth, one node is taken by the
        # blocker, so only three whole nodes are free: still nothing binds (insufficient_capacity)
        create_pod(kube, ns, pod_body("w3", gang, sched, labels=lab, annotations=ann))
        assert wait_for(
            lambda: (
                ctl.last_plan is not None
                and any(u.gang == "train" and u.reason == "insufficient_capacity" for u in ctl.last_plan.unschedulable)
            ),
            30,
        )
        workers = [p for p in pods_in(kube, ns) if p["metadata"]["name"].startswith("w")]
        assert not any(p["spec"].get("nodeName") for p in workers)
        kubelet.finish(ns, "blocker")  # the blocker ends: its node frees, the whole gang binds
        assert wait_for(
            lambda: all(p["spec"].get("nodeName") for p in pods_in(kube, ns) if p["metadata"]["name"].startswith("w")),
            30,
        )
    workers = [p for p in pods_in(kube, ns) if p["metadata"]["name"].startswith("w")]
    assert len({p["spec"]["nodeName"] for p in workers}) == 4
    reasons = {a["reason"] for a in ctl.act.audit if a["action"] == "bind" and a["target"].startswith(f"{ns}/w")}
    assert reasons <= {"gang_nvlink_domain", "gang_rack", "gang_cluster"}


def test_export_replays_through_the_same_planner(
    kube: Kube, kubelet: FakeKubelet, ns: str, kubeconfig: Path, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    prefix = f"x{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{prefix}-{i}", gpus=8) for i in range(2)])
    for i in range(4):
        create_pod(kube, ns, pod_body(f"p{i}", PodRequest("x", 1000, 1024, 2, 1000), "nobody"))
    out = tmp_path / "cluster.json"
    run = [sys.executable, "-m", "gpufleet", "k8s"]
    r = subprocess.run(
        [*run, "export", "--kubeconfig", str(kubeconfig), "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert {f"{prefix}-0", f"{prefix}-1"} <= {n["spec"]["name"] for n in doc["nodes"]}
    # keep only this test's nodes and pods, then replay: 4 x 2 GPUs on 2 x 8 GPUs leaves 8 GPUs
    doc["nodes"] = [n for n in doc["nodes"] if n["spec"]["name"].startswith(prefix)]
    doc["pods"] = [p for p in doc["pods"] if p["namespace"] == ns]
    out.write_text(json.dumps(doc))
    r = subprocess.run([*run, "replay", str(out)], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"policy": "gpufleet", "binds": 4, "unschedulable": 0, "unallocated_gpu_milli": 8000}
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = subprocess.run([*run, "replay", str(bad)], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "format" in r.stderr and "Traceback" not in r.stderr


def test_gang_member_vanishing_mid_bind_rolls_the_gang_back(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    from gpufleet.adapters.kubernetes.controller import Controller

    prefix = f"r{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{prefix}-{i}", gpus=8) for i in range(4)])
    kubelet.start()
    sched = f"gpufleet-{prefix}"
    lab, ann = {"gpufleet.io/pod-group": "g"}, {"gpufleet.io/pod-group-min": "4"}
    for i in range(4):
        create_pod(
            kube, ns, pod_body(f"w{i}", PodRequest("w", 8000, 65536, 8, 1000), sched, labels=lab, annotations=ann)
        )
    ctl = Controller(kube, _cfg(ns, sched)).start()
    try:
        assert wait_for(lambda: len([p for p in ctl.view.observation().pods if p.namespace == ns]) == 4, 10)
        assert ctl.elector.try_acquire_or_renew()
        plan = ctl.planner.plan(ctl.view.observation())
        assert len(plan.binds) == 4
        kube.request(
            "DELETE", f"/api/v1/namespaces/{ns}/pods/{plan.binds[-1].pod.split('/')[1]}", {"gracePeriodSeconds": 0}
        )
        assert ctl._bind_gang(list(plan.binds)) is False
    finally:
        ctl.stop()
        ctl.view.stop()
    # the three members that were bound are deleted again: the gang never runs partly
    assert wait_for(lambda: pods_in(kube, ns) == [], 20), [p["metadata"]["name"] for p in pods_in(kube, ns)]
    outcomes = [(a["action"], a["outcome"]) for a in ctl.act.audit]
    assert outcomes.count(("bind", "applied")) == 3 and ("bind", "not_found") in outcomes
    assert outcomes.count(("delete_pod", "applied")) == 3


def test_the_controller_serves_its_health_and_metrics(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """``--health-port``: /healthz answers 200 while the loop turns; /metrics counts the binds and shows the Lease
    held and the pods the last plan left pending, by reason (health.py)."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prefix = f"m{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{prefix}-0", gpus=8)])
    sched = f"gpufleet-{prefix}"
    for i in range(3):
        create_pod(kube, ns, pod_body(f"p{i}", PodRequest("x", 1000, 1024, 2, 1000), sched))
    create_pod(kube, ns, pod_body("huge", PodRequest("h", 1000, 1024, 16, 1000), sched))  # no node has 16 GPUs

    def get(path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()

    cfg = _cfg(ns, sched, health_port=port)
    with running_controller(kube, cfg) as ctl:
        assert wait_for(lambda: len([p for p in pods_in(kube, ns) if p["spec"].get("nodeName")]) == 3, 30)
        assert wait_for(lambda: 'reason="' in get("/metrics")[1].split("gpufleet_controller_unschedulable_pods")[-1])
        assert get("/healthz")[0] == 200
        text = get("/metrics")[1]
    assert 'gpufleet_controller_actions_total{action="bind",outcome="applied"} 3.0' in text
    assert "gpufleet_controller_leader 1.0" in text
    (line,) = [x for x in text.splitlines() if x.startswith("gpufleet_controller_unschedulable_pods{")]
    assert line.endswith(" 1.0")  # the 16-GPU pod
    assert ctl.health_server is not None
    # a port another process holds: refused at start, naming the option
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        other = Controller(kube, _cfg(ns, sched, health_port=taken.getsockname()[1]))
        with pytest.raises(ValidationError) as err:
            other.start()
    assert err.value.field == "--health-port"
    other.view.stop()
