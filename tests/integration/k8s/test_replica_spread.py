"""The replica spread in the Kubernetes world: the controller (default config: the loop's ReplicaSpread) binds the
8 replicas of one serving Deployment over 4 identical nodes at most 2 a node (the cap, ceil(0.25 x 8)), where the
packing policy alone would pile them up (tests/unit/test_binding_spread.py); binds the spread moved carry the audit
reason ``replica_spread``. Real API server; no ReplicaSet controller runs here, so the test writes the pods as the
ReplicaSet ``web-5d8f`` would."""

from __future__ import annotations

import uuid
from collections import Counter

from gpufleet.adapters.kubernetes.controller import ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.control.binding_spread import REASON_SPREAD
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for

OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "6c1f0d1e-0000-4000-8000-00000000000a",
         "controller": True}  # fmt: skip


def test_one_deployments_replicas_are_bound_across_nodes_at_most_the_cap_each(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    prefix = f"s{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{prefix}-{i}") for i in range(4)])
    kubelet.start()
    sched = f"gpufleet-{prefix}"
    kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"gpufleet.io/kind": "serving"}},
        "spec": {"replicas": 8, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "schedulerName": sched, "containers": [{"name": "srv", "image": "x"}]}}},
    })  # fmt: skip
    req = PodRequest("r", 1000, 1024, 1, 1000)
    for i in range(8):
        body = pod_body(f"web-5d8f-{i:05d}", req, sched, labels={"app": "web", "gpufleet.io/kind": "serving"})
        body["metadata"]["ownerReferences"] = [OWNER]
        create_pod(kube, ns, body)
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"lease-{sched}")
    assert cfg.replica_spread is not None  # the loop's spread, by default

    def bound() -> list[str]:
        return [p["spec"]["nodeName"] for p in pods_in(kube, ns) if p["spec"].get("nodeName")]

    with running_controller(kube, cfg) as ctl:
        assert wait_for(lambda: len(bound()) == 8, 60), (ctl.error, ctl.act.audit[:3])
    per_node = Counter(bound())
    assert sorted(per_node.values()) == [2, 2, 2, 2]
    reasons = Counter(a["reason"] for a in ctl.act.audit if a["action"] == "bind" and a["outcome"] == "applied")
    assert reasons[REASON_SPREAD] > 0 and sum(reasons.values()) == 8
