"""Informers and the observation against the real API server: watch events, 410 Gone -> re-LIST, resync,
label mapping of operator / Karpenter / cloud labels and MIG resources, node loss and pod-level conflicts."""

from __future__ import annotations

import time
import uuid

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.informer import Informer
from gpufleet.adapters.kubernetes.localcluster import LocalCluster, compact_etcd
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.observation import Observation
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, wait_for


def test_informer_follows_watch_events_and_relists_after_410(kube: Kube, ns: str) -> None:
    inf = Informer(kube, f"/api/v1/namespaces/{ns}/pods", watch_timeout_s=2, resync_s=3600).start()
    try:
        assert inf.wait_synced(10)
        create_pod(kube, ns, pod_body("a", PodRequest("x", 100, 64), "nobody"))
        assert wait_for(lambda: inf.get(f"{ns}/a") is not None, 10)
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/a", {"gracePeriodSeconds": 0})
        assert wait_for(lambda: inf.get(f"{ns}/a") is None, 10)
    finally:
        inf.stop()


def test_informer_relists_after_410_gone(kube: Kube, ns: str, cluster: LocalCluster) -> None:
    # events bypass the API server's watch cache (size 0 by default), so a watch from a version etcd has
    # compacted away gets 410 Gone, as any watch does on a real cluster after a long disconnect
    path = f"/api/v1/namespaces/{ns}/events"

    def event(name: str) -> None:
        kube.post(path, {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
                         "involvedObject": {"kind": "Pod", "name": "x", "namespace": ns}, "reason": "T"})  # fmt: skip

    event("e0")
    inf = Informer(kube, path, watch_timeout_s=1)
    inf.relist()
    inf._need_list = False
    inf._next_resync = time.monotonic() + 3600
    old = inf.resource_version
    event("e1")
    event("e2")
    compact_etcd(cluster)  # history up to e2 is gone: a watch from before e1 cannot be served
    inf.resource_version = old
    lists = inf.lists
    inf.step()
    assert inf.gone == 1 and inf._need_list
    inf.step()  # re-LIST, then watch from the fresh version
    assert inf.lists == lists + 1 and inf.get(f"{ns}/e1") is not None


def test_node_labels_and_mig_map_to_observation_fields(kube: Kube, kubelet: FakeKubelet) -> None:
    name = f"m{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(name, gpus=7, product="NVIDIA-A100-SXM4-80GB", capacity_type="spot", zone="eu-west-1b",
                               instance_type="p4de.24xlarge", node_pool="a100-spot", rack="r7", nvlink="nv3",
                               mig={"1g.10gb": 7})])  # fmt: skip
    view = ClusterView(kube).start()
    try:
        node = next(n for n in view.observation().nodes if n.name == name)
    finally:
        view.stop()
    assert (node.sku, node.capacity_type, node.zone, node.region, node.instance_type, node.node_pool) == (
        "NVIDIA-A100-SXM4-80GB", "spot", "eu-west-1b", "eu-west-1", "p4de.24xlarge", "a100-spot"
    )  # fmt: skip
    assert node.mig == (("1g.10gb", 7),) and node.spec.gpu_count == 7 and node.spec.cpu_milli == 128_000
    assert node.spec.rack > 0 and node.spec.nvlink_domain > 0 and node.schedulable and node.spec.taints == ()


def _obs(kube: Kube, names: set[str], ns: str) -> Observation:
    view = ClusterView(kube).start()
    try:
        o = view.observation()
    finally:
        view.stop()
    return Observation(
        o.now_s, tuple(n for n in o.nodes if n.name in names), tuple(p for p in o.pods if p.namespace == ns)
    )


def test_conflict_pod_bound_meanwhile_is_not_double_booked(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    p = f"c{uuid.uuid4().hex[:5]}"
    names = {f"{p}-0", f"{p}-1"}
    kubelet.register([FakeNode(n, gpus=8) for n in sorted(names)])
    sched = f"gpufleet-{p}"
    full = PodRequest("x", 1000, 1024, 8, 1000)
    create_pod(kube, ns, pod_body("mine", full, sched))
    planner = BindingPlanner(scheduler_name=sched)
    plan = planner.plan(_obs(kube, names, ns))
    (b,) = plan.binds
    other = ({f"{p}-0", f"{p}-1"} - {b.node}).pop()
    # another actor binds the same pod to the other node before our Binding lands
    kube.post(f"/api/v1/namespaces/{ns}/pods/mine/binding",
              {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "mine"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": other}})  # fmt: skip
    act = Actuator(kube)
    assert act.bind(ns, "mine", b.uid, b.node, b.gpu_slots, b.reason) == "conflict"
    planner.abort(b)
    create_pod(kube, ns, pod_body("next", full, sched))
    assert wait_for(lambda: len(_obs(kube, names, ns).pods) == 2, 10)
    plan2 = planner.plan(_obs(kube, names, ns))
    assert [x.node for x in plan2.binds] == [b.node]  # the node the other actor did not take
    assert plan2.over_capacity == ()


def test_lost_node_is_not_scheduled_on_and_its_pods_fail(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    p = f"z{uuid.uuid4().hex[:5]}"
    names = {f"{p}-0", f"{p}-1"}
    kubelet.register([FakeNode(n, gpus=8) for n in sorted(names)])
    body = pod_body("victim", PodRequest("x", 1000, 1024, 4, 1000), "none")
    body["spec"]["nodeName"] = f"{p}-0"
    create_pod(kube, ns, body)
    kubelet.lose_node(f"{p}-0")
    sched = f"gpufleet-{p}"
    for i in range(2):
        create_pod(kube, ns, pod_body(f"new{i}", PodRequest("x", 1000, 1024, 4, 1000), sched))
    obs = _obs(kube, names, ns)
    assert not next(n for n in obs.nodes if n.name == f"{p}-0").ready
    assert next(x for x in obs.pods if x.name == "victim").phase == "Failed"
    plan = BindingPlanner(scheduler_name=sched).plan(obs)
    assert sorted(b.node for b in plan.binds) == [f"{p}-1", f"{p}-1"]


def test_kueue_workloads_are_observed(kube: Kube, ns: str) -> None:
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "train"},
          "spec": {"queueName": "gpufleet", "podSets": [{"name": "workers", "count": 4, "template": {"spec": {
              "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]}}  # fmt: skip
    kube.post(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads", wl)
    view = ClusterView(kube).start()
    try:
        got = [w for w in view.observation().workloads if w.namespace == ns]
    finally:
        view.stop()
    assert [(w.name, w.queue, w.pod_sets, w.admitted) for w in got] == [("train", "gpufleet", (("workers", 4),), False)]
