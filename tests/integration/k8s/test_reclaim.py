"""Consolidation through cordon + the Eviction API on the real API server: checkpoint handshake first,
a PDB with 0 disruptions stops it, an idle serving pod is never evicted, a dry run changes nothing."""

from __future__ import annotations

import time
import uuid
from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.reclaim import apply_drain, apply_reclaim
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.control.reclaim import NodeDrain, plan_reclaim
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for


def _setup(kube: Kube, kubelet: FakeKubelet, ns: str) -> tuple[list[str], dict[str, Any]]:
    p = f"r{uuid.uuid4().hex[:5]}"
    names = [f"{p}-a", f"{p}-b", f"{p}-c"]
    kubelet.register([FakeNode(n, gpus=8) for n in names])
    kubelet.start()

    def put(name: str, node: str, gpus: int, kind: str, coop: bool = True) -> None:
        labels = {"gpufleet.io/kind": kind, "app": name, "test.gpufleet.io/checkpoints": str(coop).lower()}
        ann = {"gpufleet.io/checkpointable": "true"} if kind == "training" else {}
        body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), "none", labels=labels, annotations=ann)
        body["spec"]["nodeName"] = node
        create_pod(kube, ns, body)

    put("small-train", names[0], 1, "training")  # node a: lightly used, movable
    put("big-train", names[1], 5, "training")  # node b: fuller, receives
    put("idle-serving", names[2], 1, "serving")  # node c: serving, never moved
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    return names, {}


def _plan(kube: Kube, ns: str, names: list[str]) -> Any:
    view = ClusterView(kube).start()
    try:
        obs = view.observation()
    finally:
        view.stop()
    mine = type(obs)(
        obs.now_s, tuple(n for n in obs.nodes if n.name in names), tuple(p for p in obs.pods if p.namespace == ns)
    )
    return plan_reclaim(mine, int(time.time()))


def test_consolidation_evicts_after_checkpoint_and_never_serving(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    names, _ = _setup(kube, kubelet, ns)
    plan = _plan(kube, ns, names)
    assert [d.node for d in plan.drains] == [names[0]]
    assert plan.drains[0].evict == (f"{ns}/small-train",) and plan.drains[0].checkpoint_first == (f"{ns}/small-train",)
    assert (names[2], "latency_sensitive") in plan.skipped
    act = Actuator(kube)
    assert apply_reclaim(act, plan, checkpoint_timeout_s=20) == {names[0]: "drained"}
    actions = [(a["action"], a["outcome"]) for a in act.audit]
    assert actions == [("cordon", "applied"), ("annotate", "applied"), ("evict", "applied")]
    assert act.eviction_api() == "policy/v1beta1"  # what 1.20's discovery serves (1.22+ serve policy/v1 too)
    assert kube.get(f"/api/v1/nodes/{names[0]}")["spec"].get("unschedulable") is True
    assert wait_for(lambda: "small-train" not in {p["metadata"]["name"] for p in pods_in(kube, ns)}, 20)
    assert "idle-serving" in {p["metadata"]["name"] for p in pods_in(kube, ns)}


def test_pdb_with_zero_disruptions_stops_the_drain(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    names, _ = _setup(kube, kubelet, ns)
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
           "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "small-train"}}}}  # fmt: skip
    kube.post(f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets", pdb)
    assert wait_for(
        lambda: (
            "observedGeneration"
            in kube.get(f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/keep").get("status", {})
        ),
        20,
    )
    plan = _plan(kube, ns, names)
    act = Actuator(kube)
    assert apply_reclaim(act, plan, checkpoint_timeout_s=20) == {names[0]: "blocked_by_pdb"}
    ev = [a for a in act.audit if a["action"] == "evict"]
    assert ev and ev[0]["outcome"] == "refused_429"
    assert kube.get(f"/api/v1/nodes/{names[0]}")["spec"].get("unschedulable") in (None, False)
    assert "small-train" in {p["metadata"]["name"] for p in pods_in(kube, ns)}


def test_evicted_pods_keep_their_own_termination_grace(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """An eviction leaves a pod its own terminationGracePeriodSeconds (a serving pod draining its requests, a trainer
    flushing its state), as kubectl drain does; until session 40 every eviction cut it to 30 s. ``grace_s`` overrides
    it (the controller's ``--eviction-grace-s``)."""
    node = f"g{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    for name in ("slow", "capped"):
        body = pod_body(name, PodRequest("x", 1000, 1024, 1, 1000), "none", labels={"gpufleet.io/kind": "training"})
        body["spec"] |= {"nodeName": node, "terminationGracePeriodSeconds": 300}
        create_pod(kube, ns, body)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    kubelet.stop()  # no kubelet to finish the deletions: the pods stay Terminating with the grace they were given
    act = Actuator(kube)
    assert apply_drain(act, NodeDrain(node, (f"{ns}/slow",), (), 1, "test"), cordon=False) == "drained"
    assert apply_drain(act, NodeDrain(node, (f"{ns}/capped",), (), 1, "test"), cordon=False, grace_s=5) == "drained"
    meta = {p["metadata"]["name"]: p["metadata"] for p in pods_in(kube, ns)}
    assert meta["slow"]["deletionTimestamp"] and meta["slow"]["deletionGracePeriodSeconds"] == 300
    assert meta["capped"]["deletionTimestamp"] and meta["capped"]["deletionGracePeriodSeconds"] == 5


def test_reclaim_dry_run_changes_nothing(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    names, _ = _setup(kube, kubelet, ns)
    kubelet.stop()  # nothing else writes meanwhile

    def state() -> dict[str, Any]:
        out: dict[str, Any] = {p["metadata"]["name"]: p for p in pods_in(kube, ns)}
        out |= {n: kube.get(f"/api/v1/nodes/{n}") for n in names}
        return out

    before = state()
    act = Actuator(kube, dry_run=True)
    assert apply_reclaim(act, _plan(kube, ns, names)) == {names[0]: "dry_run"}
    assert state() == before
    assert [a["action"] for a in act.audit] == ["cordon", "annotate", "evict"]


def test_controller_consolidates_on_its_cadence(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    from gpufleet.adapters.kubernetes.controller import ControllerConfig
    from tests.integration.k8s.helpers import running_controller

    names, _ = _setup(kube, kubelet, ns)
    cfg = ControllerConfig(scheduler_name=f"s-{ns}", namespace=ns, lease_name=f"l-{ns}", consolidate_every_s=0.5,
                           checkpoint_timeout_s=20)  # fmt: skip
    with running_controller(kube, cfg) as ctl:
        assert wait_for(lambda: bool(ctl.reclaim_results), 40)
    assert ctl.reclaim_results[0].get(names[0]) == "drained"
    assert "idle-serving" in {p["metadata"]["name"] for p in pods_in(kube, ns)}
