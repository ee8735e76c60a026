"""Review nodes3: hostile requests on pods and nodes, read by the adapter (adapters/kubernetes/labels.py) and fed to
the binding plan and the node release."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters.kubernetes.labels import MAX_NODE_GPUS, TopologyIds, node_from_json, pod_footprint, pod_from_json
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError
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
