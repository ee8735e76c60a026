"""Review: the drain evicts the pod it decided on, not whichever pod now carries that name."""

from __future__ import annotations

import time
import uuid

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.reclaim import apply_reclaim
from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.control.observation import Observation
from gpufleet.control.reclaim import plan_reclaim
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for


def test_a_pod_recreated_under_the_same_name_elsewhere_is_not_evicted(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: NodeDrain carries pod keys only and Actuator.evict posts an Eviction by name, with no
    deleteOptions.preconditions.uid (act.py evict). Between the observation that decided a drain and its evictions (the
    checkpoint handshake alone may take checkpoint_timeout_s = 120 s) a StatefulSet-style pod can end and be recreated
    under the same name on ANOTHER node; draining node A then evicts that new pod on node B, a pod nobody decided to
    move (it is not on the drained node and was never checkpoint-asked)."""
    p = f"e{uuid.uuid4().hex[:5]}"
    a, b = f"{p}-a", f"{p}-b"
    kubelet.register([FakeNode(a, gpus=8), FakeNode(b, gpus=8)])
    kubelet.start()

    def put(name: str, node: str, gpus: int) -> None:
        body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), "none",
                        labels={"gpufleet.io/kind": "batch", "app": name})  # fmt: skip
        body["spec"]["nodeName"] = node
        create_pod(kube, ns, body)

    put("w-0", a, 1)  # node a: lightly used, movable
    put("big", b, 5)  # node b: fuller, receives
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    view = ClusterView(kube).start()
    try:
        obs = view.observation()
    finally:
        view.stop()
    mine = Observation(obs.now_s, tuple(n for n in obs.nodes if n.name in (a, b)),
                       tuple(x for x in obs.pods if x.namespace == ns))  # fmt: skip
    plan = plan_reclaim(mine, int(time.time()))
    assert [(d.node, d.evict) for d in plan.drains] == [(a, (f"{ns}/w-0",))]
    # meanwhile w-0 ends and its controller recreates it under the same name, this time on node b
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/w-0", {"gracePeriodSeconds": 0})
    assert wait_for(lambda: "w-0" not in {x["metadata"]["name"] for x in pods_in(kube, ns)}, 10)
    put("w-0", b, 1)
    new_uid = kube.get(f"/api/v1/namespaces/{ns}/pods/w-0")["metadata"]["uid"]
    assert wait_for(lambda: kube.get(f"/api/v1/namespaces/{ns}/pods/w-0")["status"].get("phase") == "Running", 10)

    act = Actuator(kube)
    apply_reclaim(act, plan, checkpoint_timeout_s=5)
    time.sleep(1.0)  # let the fake kubelet finalise a deletion, if any
    try:
        now = kube.get(f"/api/v1/namespaces/{ns}/pods/w-0")
    except ApiError as exc:
        assert exc.status != 404, "the new w-0 on node b (never decided on) was evicted by node a's drain"
        raise
    assert now["metadata"]["uid"] == new_uid and not now["metadata"].get("deletionTimestamp"), (
        "the new w-0 on node b (never decided on) was evicted by node a's drain"
    )
