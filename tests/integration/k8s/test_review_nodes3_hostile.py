"""Review nodes3: hostile pod requests the real API server (v1.20.2) accepts. It stores ``nvidia.com/gpu: 1E40``
(as ``10e39``) and ``cpu: 1e30`` and refuses only values whose digits overflow its int64 path
(``99999999999999999999``): gpufleet reads what it stores."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for


def _huge(name: str, sched: str, gpus: str, cpu: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": sched, "containers": [{"name": "m", "image": "x", "resources": {
                "requests": {"nvidia.com/gpu": gpus, "cpu": cpu}, "limits": {"nvidia.com/gpu": gpus}}}]}}  # fmt: skip


def test_a_pod_asking_1e40_gpus_does_not_stop_the_controller(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: a pod whose ``nvidia.com/gpu`` is ``1E40`` (the API server stores it) was read as
    10^40 GPUs, and the binding plan's node table (int64 columns) raised OverflowError: the controller's loop ended
    (and would again after every restart, the pod still there), binding nothing for anyone. Now a request beyond
    ``labels.MAX_REQUEST`` is refused where it is read, naming the field (``ClusterView.bad_objects``); the pod is
    left out, the others are bound."""
    sched = f"s-{ns}"
    node = f"h{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    create_pod(kube, ns, _huge("huge-gpu", sched, "1E40"))
    create_pod(kube, ns, _huge("huge-cpu", sched, "1", cpu="1e30"))
    create_pod(kube, ns, pod_body("fine", PodRequest("x", 1000, 1024, 1, 1000), sched))
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{ns}")
    ctl = Controller(kube, cfg).start()
    t = threading.Thread(target=ctl.run, daemon=True)
    t.start()
    try:
        bound = wait_for(
            lambda: any(p["metadata"]["name"] == "fine" and p["spec"].get("nodeName") for p in pods_in(kube, ns)), 30
        )
        alive = t.is_alive()
    finally:
        ctl.stop()
        t.join(timeout=30)
    assert ctl.error == "" and alive and bound
    bad = ctl.view.bad_objects
    assert "nvidia.com/gpu" in bad[f"pod:{ns}/huge-gpu"] and "at most" in bad[f"pod:{ns}/huge-gpu"]
    assert "requests.cpu" in bad[f"pod:{ns}/huge-cpu"]
    pods = {p["metadata"]["name"]: p for p in pods_in(kube, ns)}
    assert not pods["huge-gpu"]["spec"].get("nodeName") and not pods["huge-cpu"]["spec"].get("nodeName")


def test_a_node_relabelled_to_another_gpu_product_is_flagged(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: a node whose ``nvidia.com/gpu.product`` says H100 while its instance type
    (``node.kubernetes.io/instance-type: g6.48xlarge``, an L4 machine) says otherwise was priced and metered as an
    H100, with no sign anywhere. Now the controller records it once (audit ``node_product`` ``mismatch``, with both
    readings; counted on /metrics), and again only when the reading changes; a consistent node is never flagged."""
    sched = f"s-{ns}"
    p = f"m{uuid.uuid4().hex[:5]}"
    liar, honest = f"{p}-liar", f"{p}-ok"
    kubelet.register([FakeNode(liar, instance_type="g6.48xlarge"), FakeNode(honest)])
    kubelet.start()
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{ns}")
    with running_controller(kube, cfg) as ctl:
        assert wait_for(lambda: any(a["action"] == "node_product" for a in ctl.act.audit), 20)
        assert wait_for(lambda: ctl.last_plan is not None, 10)
        time.sleep(1.0)  # a few more ticks: recorded once
        kube.patch(f"/api/v1/nodes/{liar}", {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}})
        assert wait_for(lambda: sum(a["action"] == "node_product" for a in ctl.act.audit) >= 2, 20)
    flags = [a for a in ctl.act.audit if a["action"] == "node_product"]
    assert [(a["target"], a["outcome"]) for a in flags] == [(liar, "mismatch"), (liar, "consistent")]
    assert flags[0]["reason"] == "gpu_product_vs_instance_type"
    assert (flags[0]["product"], flags[0]["instance_type"], flags[0]["instance_product"]) == (
        "NVIDIA-H100-80GB-HBM3", "g6.48xlarge", "nvidia-l4")  # fmt: skip
