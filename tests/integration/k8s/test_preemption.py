"""Priority preemption by the controller on the real API server: a high-priority training pod (or gang) that does
not fit gets lower-priority checkpointable training evicted (checkpoint handshake first, then the Eviction API,
no cordon) and is bound where it ran; serving is never evicted for training."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for

PC = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture
def classes(kube: Kube) -> Iterator[tuple[str, str]]:
    """A low and a high PriorityClass (values 100 and 10,000), unique to the test."""
    tag = uuid.uuid4().hex[:6]
    names = (f"low-{tag}", f"high-{tag}")
    for name, value in zip(names, (100, 10_000), strict=True):
        kube.post(PC, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                       "value": value})  # fmt: skip
    yield names
    for name in names:
        try:
            kube.delete(f"{PC}/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise


def _running(kube: Kube, ns: str, name: str, node: str, gpus: int, kind: str, pc: str) -> None:
    labels = {"gpufleet.io/kind": kind, "test.gpufleet.io/checkpoints": "true"}
    ann = {"gpufleet.io/checkpointable": "true"} if kind == "training" else {}
    body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), "none", labels=labels, annotations=ann,
                    priority_class=pc)  # fmt: skip
    body["spec"]["nodeName"] = node
    create_pod(kube, ns, body)


def _pending(kube: Kube, ns: str, name: str, gpus: int, sched: str, pc: str, gang: str = "", n: int = 0) -> None:
    labels = {"gpufleet.io/kind": "training"}
    ann = {"gpufleet.io/checkpointable": "true"}
    if gang:
        labels["gpufleet.io/pod-group"] = gang
        ann["gpufleet.io/pod-group-min"] = str(n)
    body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), sched, labels=labels, annotations=ann,
                    priority_class=pc)  # fmt: skip
    create_pod(kube, ns, body)


def _by_name(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in pods_in(kube, ns)}


def _all_running(kube: Kube, ns: str) -> bool:
    return all(p["status"].get("phase") == "Running" for p in pods_in(kube, ns))


def _cfg(ns: str) -> ControllerConfig:
    return ControllerConfig(scheduler_name=f"s-{ns}", namespace=ns, lease_name=f"l-{ns}", checkpoint_timeout_s=20)


def _audit(ctl: Controller, action: str) -> list[dict[str, Any]]:
    return [a for a in ctl.act.audit if a["action"] == action]


def test_high_priority_training_preempts_checkpointable_low_priority(
    kube: Kube, kubelet: FakeKubelet, ns: str, classes: tuple[str, str]
) -> None:
    low, high = classes
    node = f"p{uuid.uuid4().hex[:5]}-a"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    _running(kube, ns, "low-a", node, 4, "training", low)
    _running(kube, ns, "low-b", node, 4, "training", low)
    assert wait_for(lambda: _all_running(kube, ns), 30)
    assert {p["spec"]["priority"] for p in pods_in(kube, ns)} == {100}  # the Priority admission plugin set it
    _pending(kube, ns, "urgent", 8, f"s-{ns}", high)
    with running_controller(kube, _cfg(ns)) as ctl:
        assert wait_for(lambda: _by_name(kube, ns).get("urgent", {}).get("spec", {}).get("nodeName") == node, 60)
    names = set(_by_name(kube, ns))
    assert names == {"urgent"}  # both victims evicted and gone
    (d,) = ctl.preemptions
    assert d.key == f"{ns}/urgent" and d.nodes == (node,) and d.reason == "preempt_for_priority"
    assert sorted(v.pod for v in d.victims) == [f"{ns}/low-a", f"{ns}/low-b"]
    assert ctl.preempt_results == [(d.key, {node: "drained"})]
    # the handshake came first, then the evictions, then the bind; the node was never cordoned
    order = [(a["action"], a["target"]) for a in ctl.act.audit if a["action"] in ("annotate", "evict", "bind")]
    assert [a for a, _ in order] == ["annotate", "annotate", "evict", "evict", "bind"]
    assert all(a["reason"] == "preempt_for_priority" and a["outcome"] == "applied" for a in _audit(ctl, "evict"))
    (bind,) = _audit(ctl, "bind")
    assert bind["reason"] == "preempted_room" and bind["node"] == node
    assert _audit(ctl, "cordon") == [] and kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable") is None


def test_serving_is_never_evicted_for_training(
    kube: Kube, kubelet: FakeKubelet, ns: str, classes: tuple[str, str]
) -> None:
    low, high = classes
    node = f"p{uuid.uuid4().hex[:5]}-a"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    _running(kube, ns, "idle-serving", node, 8, "serving", low)
    assert wait_for(lambda: _all_running(kube, ns), 30)
    _pending(kube, ns, "urgent", 8, f"s-{ns}", high)
    with running_controller(kube, _cfg(ns)) as ctl:
        seen = f"{ns}/urgent"
        assert wait_for(lambda: ctl.last_plan is not None and seen in {u.pod for u in ctl.last_plan.unschedulable}, 20)
        assert not wait_for(lambda: bool(_audit(ctl, "evict") or _audit(ctl, "preempt")), 5)  # 5 s of ticks
        assert [(n.key, n.reason) for n in ctl.last_no_preempt] == [(seen, "no_eligible_victims")]
    pods = _by_name(kube, ns)
    assert set(pods) == {"idle-serving", "urgent"} and not pods["urgent"]["spec"].get("nodeName")
    assert ctl.preemptions == [] and _audit(ctl, "annotate") == []


def test_gang_preempts_whole_nodes(kube: Kube, kubelet: FakeKubelet, ns: str, classes: tuple[str, str]) -> None:
    low, high = classes
    p = f"p{uuid.uuid4().hex[:5]}"
    nodes = [f"{p}-a", f"{p}-b", f"{p}-c"]
    kubelet.register([FakeNode(n, gpus=8) for n in nodes])
    kubelet.start()
    _running(kube, ns, "low-a", nodes[0], 8, "training", low)
    _running(kube, ns, "low-b", nodes[1], 8, "training", low)
    _running(kube, ns, "serve-c", nodes[2], 8, "serving", low)
    assert wait_for(lambda: _all_running(kube, ns), 30)
    for i in range(2):
        _pending(kube, ns, f"w{i}", 8, f"s-{ns}", high, gang="g", n=2)

    def gang_bound() -> bool:
        pods = _by_name(kube, ns)
        return all(pods.get(f"w{i}", {}).get("spec", {}).get("nodeName") for i in range(2))

    with running_controller(kube, _cfg(ns)) as ctl:
        assert wait_for(gang_bound, 60)
    pods = _by_name(kube, ns)
    assert set(pods) == {"w0", "w1", "serve-c"}
    assert sorted(pods[f"w{i}"]["spec"]["nodeName"] for i in range(2)) == nodes[:2]
    (d,) = ctl.preemptions
    assert d.gang == "g" and d.plan_reason == "gang_lowest_loss"
    assert {a["reason"] for a in _audit(ctl, "bind")} == {"preempted_room"}


def test_unanswered_checkpoint_cancels_the_preemption(
    kube: Kube, kubelet: FakeKubelet, ns: str, classes: tuple[str, str]
) -> None:
    low, high = classes
    node = f"p{uuid.uuid4().hex[:5]}-a"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    _running(kube, ns, "silent", node, 8, "training", low)
    kube.patch(
        f"/api/v1/namespaces/{ns}/pods/silent", {"metadata": {"labels": {"test.gpufleet.io/checkpoints": "false"}}}
    )
    assert wait_for(lambda: _all_running(kube, ns), 30)
    _pending(kube, ns, "urgent", 8, f"s-{ns}", high)
    cfg = ControllerConfig(scheduler_name=f"s-{ns}", namespace=ns, lease_name=f"l-{ns}", checkpoint_timeout_s=1)
    with running_controller(kube, cfg) as ctl:
        assert wait_for(lambda: len(ctl.planner.dropped) >= 1, 30)
    assert ctl.planner.dropped[0] == (f"{ns}/urgent", "eviction_failed")
    assert ctl.preempt_results[0] == (f"{ns}/urgent", {node: "checkpoint_timeout"})
    pods = _by_name(kube, ns)
    assert set(pods) == {"silent", "urgent"} and not pods["urgent"]["spec"].get("nodeName")
    assert _audit(ctl, "evict") == [] and _audit(ctl, "bind") == []
