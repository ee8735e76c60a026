"""Review nodes3: hostile requests on pods and nodes, read by the adapter (adapters/kubernetes/labels.py) and fed to
the binding plan and the node release."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.labels import MAX_NODE_GPUS, TopologyIds, node_from_json, pod_footprint, pod_from_json
from gpufleet.adapters.kubernetes.product_check import ProductCheck, product_mismatch
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedNode
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec
from tests.unit.test_node_release import Recorder

T0 = 1_800_000_000.0


def _node(name: str, cpu: str = "192") -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "karpenter.sh/capacity-type": "on-demand"}
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-12-01T00:00:00Z"}, "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": "2000Gi", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def _pod(name: str, gpus: str, cpu: str = "1", containers: int = 1, node: str = "") -> dict[str, Any]:
    res = {"requests": {"nvidia.com/gpu": gpus, "cpu": cpu}, "limits": {"nvidia.com/gpu": gpus}}
    spec: dict[str, Any] = {"schedulerName": "gpufleet", "containers": [
        {"name": f"c{i}", "resources": res} for i in range(containers)]}  # fmt: skip
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}",
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}  # fmt: skip


@pytest.mark.parametrize(
    ("gpus", "cpu", "containers", "field"),
    [
        ("1000000", "1", 1, "containers[0].resources.requests.nvidia.com/gpu"),
        ("1E40", "1", 1, "containers[0].resources.requests.nvidia.com/gpu"),
        ("1", "1e30", 1, "containers[0].resources.requests.cpu"),
        ("600", "1", 2, "containers[*].resources.requests.nvidia.com/gpu"),  # each within, the pod's sum not
    ],
)
def test_a_request_no_node_can_hold_is_a_bad_object_naming_its_field(
    gpus: str, cpu: str, containers: int, field: str
) -> None:
    """Review (fixed), the defect: ``nvidia.com/gpu: 1E40`` was read as 10^40 GPUs (the binding plan then raised
    OverflowError and ended the controller's loop), ``10^6`` as a pending pod that held every idle node of every
    product it may run on (pending work) for good. A pod asking more GPUs than one node holds
    (``MAX_NODE_GPUS``), or more CPU or memory than ``MAX_CPU_OR_MEMORY``, is a bad object naming the field."""
    with pytest.raises(ValidationError) as got:
        pod_from_json(_pod("huge", gpus, cpu, containers))
    assert got.value.field == f"pod[ml/huge].spec.{field}"
    assert "at most" in str(got.value)
    # bound to a node by hand (spec.nodeName): no footprint either (it holds nothing the table could count)
    assert pod_footprint(_pod("huge", gpus, cpu, containers, node="n0")) is None


def test_a_node_claiming_1e30_cpus_is_a_bad_object() -> None:
    """Review (fixed): a node's ``cpu: 1e30`` overflowed the scheduler's int64 column as a pod's did."""
    with pytest.raises(ValidationError) as got:
        node_from_json(_node("n0", cpu="1e30"), TopologyIds())
    assert got.value.field == "node[n0].status.allocatable.cpu"


def test_the_largest_readable_pod_is_unschedulable_and_plans_run() -> None:
    """Review (holds): a pod of ``MAX_NODE_GPUS`` GPUs is read, planned (unschedulable, a reason code, no crash) and
    never preempted for."""
    node = node_from_json(_node("n0"), TopologyIds())
    huge = pod_from_json(_pod("huge", str(MAX_NODE_GPUS)))
    obs = Observation(T0, (node,), (huge,))
    pl = BindingPlanner()
    plan = pl.plan(obs)
    assert [(u.pod, u.reason) for u in plan.unschedulable] == [("ml/huge", "no_node_with_gpu_model_and_count")]
    assert pl.preempt(obs, plan.unschedulable) == ((), ())
    rec = Recorder()
    NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG).plan(obs)
    assert rec.asked[0].pending_gpus == MAX_NODE_GPUS


def _labelled(instance: str = "", **labels: str) -> ObservedNode:
    spec = NodeSpec("n0", 1000, 1024, 8, "x", labels=tuple(sorted(f"{k}={v}" for k, v in labels.items())))
    return ObservedNode(spec, sku=labels.get("nvidia.com/gpu.product", ""), instance_type=instance)


@pytest.mark.parametrize(
    ("instance", "labels", "reason"),
    [
        ("g6.48xlarge", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "gpu_product_vs_instance_type"),
        ("p5.48xlarge", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, None),
        (
            "",
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "cloud.google.com/gke-accelerator": "nvidia-l4"},
            "gpu_product_vs_gke_accelerator",
        ),
        ("", {"nvidia.com/gpu.product": "NVIDIA-L4", "cloud.google.com/gke-accelerator": "nvidia-l4"}, None),
        (
            "",
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "karpenter.k8s.aws/instance-gpu-name": "a10g"},
            "gpu_product_vs_instance_gpu_name",
        ),
        ("", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "karpenter.k8s.aws/instance-gpu-name": "h100"}, None),
        ("g6.48xlarge", {"nvidia.com/gpu.product": "Mystery-GPU"}, None),  # outside the catalog: cannot tell
        ("g5.48xlarge", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, None),  # an instance type not mapped
        ("g6.48xlarge", {}, None),  # no label: the product is the instance type's own
    ],
)
def test_product_mismatch_compares_in_catalog_skus(instance: str, labels: dict[str, str], reason: str | None) -> None:
    """Review (fixed): what contradicts a node's ``nvidia.com/gpu.product`` (adapters/kubernetes/product_check.py),
    and no flag where the readings cannot be compared."""
    got = product_mismatch(_labelled(instance, **labels), BUILTIN_PRICE_CATALOG.sku_ids(), {})
    assert (got.reason if got else None) == reason


def test_product_check_records_once_then_its_end_and_forgets_gone_nodes() -> None:
    """Review (fixed): a mismatch is recorded when it begins and when it ends, not every tick; a node gone is
    forgotten (and flagged anew should the name come back with the same mismatch)."""
    act = Actuator(Kube(KubeConfig(server="http://127.0.0.1:9")), dry_run=True)  # records only: nothing is sent
    check = ProductCheck(BUILTIN_PRICE_CATALOG.sku_ids())
    liar = _labelled("g6.48xlarge", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    for _ in range(3):
        check.scan((liar,), act)
    check.scan((replace(liar),), act)  # a new object (another resourceVersion), the same mismatch
    records = [(a["target"], a["reason"], a["outcome"]) for a in act.audit]
    assert records == [("n0", "gpu_product_vs_instance_type", "mismatch")]
    fixed = _labelled("g6.48xlarge", **{"nvidia.com/gpu.product": "NVIDIA-L4"})
    check.scan((fixed,), act)
    records = [(a["target"], a["reason"], a["outcome"]) for a in act.audit]
    assert records[-1] == ("n0", "gpu_product_vs_instance_type", "consistent")
    check.scan((liar,), act)
    check.scan((), act)
    check.scan((replace(liar),), act)
    assert [a["outcome"] for a in act.audit] == ["mismatch", "consistent", "mismatch", "mismatch"]
    assert act.audit[0]["instance_product"] == "nvidia-l4" and act.audit[0]["action"] == "node_product"
