"""Review: the binding planner's accounting of what already holds a node's GPUs, against the real API server."""

from __future__ import annotations

import uuid

from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.observation import Observation
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, wait_for

FULL = PodRequest("x", 1000, 1024, 8, 1000)


def _obs(kube: Kube, names: set[str], ns: str) -> tuple[Observation, ClusterView]:
    view = ClusterView(kube).start()
    try:
        o = view.observation()
    finally:
        view.stop()
    mine = Observation(
        o.now_s, tuple(n for n in o.nodes if n.name in names), tuple(p for p in o.pods if p.namespace == ns)
    )
    return mine, view


def _running(kube: Kube, ns: str, name: str) -> None:
    kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status",
               {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})  # fmt: skip


def test_a_terminating_pod_still_holds_its_gpus(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: ObservedPod.active is False for a pod with a deletionTimestamp, and
    BindingPlanner._reconcile only holds resources for active bound pods, so the 8 GPUs of a pod still terminating (a
    serving replica draining requests in its 300 s grace period) count as free: the planner binds a new 8-GPU pod onto
    the same node at once, which the kubelet's device manager refuses (the GPUs are still allocated). kube-scheduler
    keeps a terminating pod's resources until the pod object is gone; so does gpufleet's own preemption path ('a pod
    still terminating keeps its GPUs on the node', control/binding.py docstring)."""
    p = f"t{uuid.uuid4().hex[:5]}"
    node = f"{p}-0"
    kubelet.register([FakeNode(node, gpus=8)])
    old = pod_body("old", FULL, "none")
    old["spec"]["nodeName"] = node
    old["spec"]["terminationGracePeriodSeconds"] = 300
    create_pod(kube, ns, old)
    _running(kube, ns, "old")
    # a rolling update / scale-down deletes it gracefully: no kubelet confirms, so it stays terminating
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/old", {"gracePeriodSeconds": 300})
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/old")["metadata"].get("deletionTimestamp")
    sched = f"gpufleet-{p}"
    create_pod(kube, ns, pod_body("new", FULL, sched))
    obs, _ = _obs(kube, {node}, ns)
    assert {x.name for x in obs.pods} == {"old", "new"}
    plan = BindingPlanner(scheduler_name=sched).plan(obs)
    assert plan.binds == (), f"bound onto GPUs a terminating pod still holds: {plan.binds}"


def test_a_running_pod_with_a_malformed_annotation_still_holds_its_gpus(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: ClusterView._convert drops every object whose conversion raises ValidationError
    (view.py), pods included. A running pod bound to a node, holding all 8 of its GPUs, whose gang annotation has a typo
    (gpufleet.io/pod-group-min: "four") vanishes from the observation, so the planner sees its node empty and binds
    another 8-GPU pod there: the node is double-booked (the controller docstring promises nothing is). The bad pod
    should be left out of scheduling decisions but its node's resources must stay held."""
    p = f"b{uuid.uuid4().hex[:5]}"
    node = f"{p}-0"
    kubelet.register([FakeNode(node, gpus=8)])
    bad = pod_body("typo", FULL, "none", annotations={"gpufleet.io/pod-group-min": "four"})
    bad["spec"]["nodeName"] = node
    create_pod(kube, ns, bad)
    _running(kube, ns, "typo")
    sched = f"gpufleet-{p}"
    create_pod(kube, ns, pod_body("new", FULL, sched))
    assert wait_for(lambda: len(kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]) == 2, 10)
    obs, view = _obs(kube, {node}, ns)
    assert any("typo" in k for k in view.bad_objects)  # reported, fine
    plan = BindingPlanner(scheduler_name=sched).plan(obs)
    assert plan.binds == (), f"bound onto the GPUs of a running pod the view could not read: {plan.binds}"


def test_one_node_reporting_an_absurd_gpu_count_does_not_crash_planning(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: node_from_json accepts any nvidia.com/gpu allocatable (a valid quantity such as 1P =
    10^15 from a broken device plugin), and NodeTable.from_specs builds a (nodes x max GPUs) int32 matrix from it, so
    planning raises (MemoryError / ValueError / OverflowError from numpy). In the controller the exception escapes
    tick() and run(): one bad Node stops scheduling for the whole cluster, with a traceback. Expected: the node is
    refused as a bad object naming node[...].status.allocatable.nvidia.com/gpu and the rest is planned."""
    p = f"g{uuid.uuid4().hex[:5]}"
    good, bogus = f"{p}-0", f"{p}-1"
    kubelet.register([FakeNode(good, gpus=8), FakeNode(bogus, gpus=10**15)])
    sched = f"gpufleet-{p}"
    create_pod(kube, ns, pod_body("one", PodRequest("x", 1000, 1024, 1, 1000), sched))
    obs, _ = _obs(kube, {good, bogus}, ns)
    try:
        plan = BindingPlanner(scheduler_name=sched).plan(obs)
    except Exception as exc:  # the defect: a raw numpy error from one node's status
        raise AssertionError(f"planning crashed on one node's allocatable: {type(exc).__name__}: {exc}") from None
    assert [b.node for b in plan.binds] == [good]
