"""Before a serving Deployment scales down, the controller writes each replica's
``controller.kubernetes.io/pod-deletion-cost`` in gpufleet's scale-down order (control/replica_victims.py, the
rule the simulator's gpufleet loop runs): the replica on the on-demand node lowest, so that Kubernetes' ReplicaSet
controller (1.22+) stops it and the on-demand node can empty. Real API server and Prometheus; no ReplicaSet
controller runs here (an API server alone), so the test reads the annotations the controller wrote."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.control.replica_victims import DELETION_COST, REASON_DELETION_COST
from tests.integration.k8s.helpers import wait_for
from tests.integration.k8s.test_replica_scaling import SPAN_S, T0, prometheus_url  # noqa: F401 (fixture)

H100 = "NVIDIA-H100-80GB-HBM3"
# 40 requests/s (the Prometheus fixture's series) at 100 a replica: far fewer than the 4 replicas running
SCALE = {"gpufleet.io/target-rps": "100", "gpufleet.io/max-replicas": "8", "gpufleet.io/min-replicas": "1"}


def _deployment(kube: Kube, ns: str, replicas: int) -> None:
    kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "llm", "labels": {"gpufleet.io/kind": "serving"}, "annotations": SCALE},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "llm"}},
                 "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {
                     "nodeSelector": {"nvidia.com/gpu.product": H100},
                     "containers": [{"name": "srv", "image": "x", "resources": {
                         "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}},
    })  # fmt: skip


def _replica(kube: Kube, ns: str, name: str, node: str) -> None:
    """A pod as the ReplicaSet llm-5d8f would create it, bound to ``node``, then Running and Ready."""
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-5d8f", "uid": "6c1f0d1e-0000-4000-8000-000000000001",
             "controller": True}  # fmt: skip
    kube.post(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "llm", "gpufleet.io/kind": "serving"}, "ownerReferences": [owner]},
        "spec": {"nodeName": node, "containers": [{"name": "srv", "image": "x", "resources": {
            "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
    })  # fmt: skip
    cond = [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
    kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {"phase": "Running", "conditions": cond}})


def _costs(kube: Kube, ns: str) -> dict[str, str]:
    pods: list[dict[str, Any]] = kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])
    return {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(DELETION_COST, "") for p in pods}


def test_a_scale_down_first_marks_the_replica_on_the_on_demand_node_cheapest_to_delete(
    kube: Kube,
    ns: str,
    kubelet: FakeKubelet,
    prometheus_url: str,  # noqa: F811 (the fixture imported above)
) -> None:
    od, res = f"{ns}-od", f"{ns}-res"
    kubelet.register(
        [FakeNode(od, capacity_type="on-demand"), FakeNode(res, capacity_type="reserved", node_pool="reserved")]
    )
    _deployment(kube, ns, 4)
    # the oldest replica sits alone on the on-demand node; Kubernetes' default would stop the newest
    for name, node in (
        ("llm-5d8f-abcde", od),
        ("llm-5d8f-fghij", res),
        ("llm-5d8f-klmno", res),
        ("llm-5d8f-pqrst", res),
    ):
        _replica(kube, ns, name, node)
    clock = [float(T0 + SPAN_S)]
    cfg = ControllerConfig(namespace=ns, lease_name=f"lease-{ns}", scale_every_s=60.0, prometheus_url=prometheus_url)
    ctl = Controller(kube, cfg, clock=lambda: clock[0]).start()
    try:
        assert wait_for(lambda: sum(p.namespace == ns and p.ready for p in ctl.view.observation().pods) == 4, 10)
        plan = ctl.maybe_scale()
        assert plan is not None
        (llm,) = [d for d in plan.decisions if d.namespace == ns]
        assert llm.current == 4 and llm.desired < 4  # 40 rps at 100 a replica
        costs = _costs(kube, ns)
        assert min(costs, key=lambda n: int(costs[n])) == "llm-5d8f-abcde"  # the on-demand one goes first
        assert sorted(int(v) for v in costs.values()) == [0, 1, 2, 3]
        acts = [a for a in ctl.act.audit if a["reason"] == REASON_DELETION_COST]
        assert len(acts) == 4 and {a["outcome"] for a in acts} == {"applied"}
        # annotations first, then the replicas: the ReplicaSet controller sees the order before it deletes
        order = [a["action"] for a in ctl.act.audit if a["target"].startswith(f"{ns}/")]
        assert order.index("scale") > max(i for i, a in enumerate(order) if a == "annotate")
        assert int(kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/llm")["spec"]["replicas"]) == llm.desired
    finally:
        ctl.stop()
        ctl.view.stop()
        kube.request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/llm")  # no namespace controller here
