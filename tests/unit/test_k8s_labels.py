"""Kubernetes JSON -> observation types: quantities, GPU shares, MIG, well-known labels, clear errors."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.adapters.kubernetes.fleetobjects import TierCapacity, node_pool
from gpufleet.adapters.kubernetes.labels import (
    TopologyIds,
    capacity_type,
    node_from_json,
    node_pool_from_json,
    parse_quantity,
    pod_from_json,
    pod_request,
)
from gpufleet.control.observation import ObservedNodePool
from gpufleet.domain.errors import ValidationError


@pytest.mark.parametrize(
    ("raw", "want"),
    [("500m", Decimal("0.5")), ("2", Decimal(2)), ("16Gi", Decimal(16 * 2**30)), ("1G", Decimal(10**9)),
     ("1e3", Decimal(1000)), ("128974848", Decimal(128974848)), ("0.5", Decimal("0.5"))],
)  # fmt: skip
def test_parse_quantity(raw: str, want: Decimal) -> None:
    assert parse_quantity(raw, "x") == want


def test_bad_quantity_names_the_field() -> None:
    pod = {"metadata": {"name": "p", "namespace": "n"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}  # fmt: skip
    with pytest.raises(ValidationError, match=r"pod\[n/p\].spec.containers\[0\].resources.requests.cpu"):
        pod_request(pod)


def _pod(requests: dict[str, str], ann: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "annotations": ann or {}, "labels": labels or {}},
        "spec": {"containers": [{"name": "a", "resources": {"requests": requests}},
                                {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                 "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "priority": 100},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def test_pod_requests_sum_containers_and_whole_gpus() -> None:
    r = pod_request(_pod({"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "4"}))
    assert (r.name, r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli) == ("ml/p", 2500, 1536, 4, 1000)
    assert r.node_selector == ("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",)


def test_gpu_share_annotation_and_its_errors() -> None:
    r = pod_request(_pod({"cpu": "1"}, {"gpufleet.io/gpu-milli": "250"}))
    assert (r.num_gpu, r.gpu_milli, r.is_share) == (1, 250, True)
    with pytest.raises(ValidationError, match="gpu-milli"):
        pod_request(_pod({"cpu": "1"}, {"gpufleet.io/gpu-milli": "half"}))
    with pytest.raises(ValidationError, match="gpu-milli"):
        pod_request(_pod({"cpu": "1", "nvidia.com/gpu": "2"}, {"gpufleet.io/gpu-milli": "500"}))


def test_pod_labels_gang_and_policy_fields() -> None:
    p = pod_from_json(
        _pod({"nvidia.com/gpu": "8"}, {"gpufleet.io/pod-group-min": "4", "gpufleet.io/checkpointable": "true",
                                       "gpufleet.io/gpu-slots": "0,1,2,3,4,5,6,7"},
             {"gpufleet.io/pod-group": "llm", "gpufleet.io/kind": "training", "gpufleet.io/tenant": "t1"})
    )  # fmt: skip
    assert (p.gang, p.gang_min, p.checkpointable, p.kind, p.team, p.tenant, p.priority) == (
        "llm", 4, True, "training", "ml", "t1", 100
    )  # fmt: skip
    assert p.gpu_slots == tuple(range(8)) and p.active and not p.node


def test_capacity_type_fallbacks() -> None:
    assert capacity_type({"karpenter.sh/capacity-type": "spot"}) == "spot"
    assert capacity_type({"eks.amazonaws.com/capacityType": "ON_DEMAND"}) == "on-demand"
    assert capacity_type({"eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"}) == "reserved"
    assert capacity_type({"cloud.google.com/gke-spot": "true"}) == "spot"
    assert capacity_type({"cloud.google.com/gke-preemptible": "true"}) == "spot"
    assert capacity_type({}) == ""


def test_node_mig_taints_and_topology() -> None:
    node = {
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                              "nvidia.com/gpu.clique": "c1", "topology.gpufleet.io/rack": "r2"}},
        "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"},
                            {"key": "soft", "effect": "PreferNoSchedule"}], "unschedulable": True},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "0",
                                   "nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "1"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    n = node_from_json(node, TopologyIds())
    assert n.mig == (("1g.10gb", 1), ("3g.40gb", 2))
    assert n.spec.taints == ("gpu=yes:NoSchedule",) and n.unschedulable and not n.schedulable
    assert n.spec.rack > 0 and n.spec.nvlink_domain > 0 and n.spec.memory_mib == 512 * 1024


def test_kueue_pod_group_and_scheduling_gates() -> None:
    pod = _pod({"nvidia.com/gpu": "1"}, {"kueue.x-k8s.io/pod-group-total-count": "3"},
               {"kueue.x-k8s.io/pod-group-name": "grp"})  # fmt: skip
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    p = pod_from_json(pod)
    assert (p.gang, p.gang_min, p.gated) == ("grp", 3, True)


def test_pod_start_time_preemption_policy_and_checkpoint_annotations() -> None:
    ann = {"gpufleet.io/last-checkpoint-s": "1700000000", "gpufleet.io/min-runtime-s": "600", "other.io/x": "y"}
    pod = {"metadata": {"name": "p", "namespace": "n", "creationTimestamp": "2026-12-02T15:00:00Z", "annotations": ann},
           "spec": {"containers": [], "preemptionPolicy": "Never"},
           "status": {"phase": "Running", "startTime": "2026-12-02T16:00:00Z"}}  # fmt: skip
    p = pod_from_json(pod)
    assert p.started_s == 1796227200.0 and not p.preempts
    assert p.annotation("gpufleet.io/last-checkpoint-s") == "1700000000" and p.annotation("other.io/x") == ""
    del pod["status"]["startTime"]  # type: ignore[attr-defined]
    pod["spec"] = {"containers": []}
    p = pod_from_json(pod)
    assert p.started_s == 1796223600.0 and p.preempts  # creation time stands in; PreemptLowerPriority by default


def test_karpenter_nodepools_gpu_limit_product_and_capacity_type() -> None:
    """The NodePools gpufleet emits read back (product from the template label), and a hand-written one pinned by
    requirements; a CPU NodePool shows no GPU sign."""
    mine = node_pool(TierCapacity("NVIDIA-H100-80GB-HBM3", "spot", 64))
    assert node_pool_from_json(mine) == ObservedNodePool(
        mine["metadata"]["name"], 64, ("NVIDIA-H100-80GB-HBM3",), ("spot",), gpu=True,
        taints=("gpufleet.io/spot=true:NoSchedule",),  # checkpointable work only: its nodes carry it
    )  # fmt: skip
    assert node_pool_from_json(node_pool(TierCapacity("NVIDIA-H100-80GB-HBM3", "on-demand", None))).gpu_limit is None
    theirs = {"metadata": {"name": "gpu"}, "spec": {"limits": {"cpu": "1000", "nvidia.com/gpu": "1k"}, "template": {
        "spec": {"requirements": [
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100", "a100"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]}}}}  # fmt: skip
    assert node_pool_from_json(theirs) == ObservedNodePool("gpu", 1000, ("a100", "h100"), ("on-demand", "spot"), True)
    counted = {"metadata": {"name": "g"}, "spec": {"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]}]}}}}  # fmt: skip
    assert node_pool_from_json(counted) == ObservedNodePool("g", None, gpu=True)
    cpu = {"metadata": {"name": "cpu"}, "spec": {"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"}]}}}}  # fmt: skip
    assert node_pool_from_json(cpu) == ObservedNodePool("cpu", None)
    assert node_pool_from_json(node_pool(TierCapacity("NVIDIA-H100-80GB-HBM3", "on-demand", 8))).taints == ()
    tainted = {"metadata": {"name": "t"}, "spec": {"template": {"spec": {"taints": [
        {"key": "a", "value": "1", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"},
        {"key": "c", "value": "x", "effect": "PreferNoSchedule"}]}}}}  # fmt: skip
    assert node_pool_from_json(tainted).taints == ("a=1:NoSchedule", "b=:NoExecute")  # as a node's: no preference
    tainted["spec"]["template"]["spec"]["startupTaints"] = tainted["spec"]["template"]["spec"].pop("taints")
    got = node_pool_from_json(tainted)
    assert got.startup_taints == ("a=1:NoSchedule", "b=:NoExecute") and got.taints == ()  # read alike
    with pytest.raises(ValidationError, match=r"nodepool\[x\]\.spec\.limits"):
        node_pool_from_json({"metadata": {"name": "x"}, "spec": {"limits": {"nvidia.com/gpu": "lots"}}})


def test_a_gke_node_without_feature_discovery_is_known_by_its_accelerator_label() -> None:
    """GKE installs the driver itself and puts no ``nvidia.com/gpu.product`` on a node; its accelerator label names the
    GPU, and the catalog's token rule maps it to the SKU (the inventory sync and the usage meter use this)."""
    from gpufleet.domain.catalog import PRICES_BY_SKU, sku_for

    labels = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "cloud.google.com/gke-spot": "true",
              "cloud.google.com/gke-nodepool": "a3-spot", "topology.kubernetes.io/region": "us-central1"}  # fmt: skip
    node = {"metadata": {"name": "gke-a3-1", "labels": labels},
            "status": {"allocatable": {"cpu": "208", "memory": "1843Gi", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
    n = node_from_json(node, TopologyIds())
    assert (n.sku, n.spec.gpu_model, n.capacity_type, n.region) == ("nvidia-h100-80gb", "nvidia-h100-80gb", "spot",
                                                                    "us-central1")  # fmt: skip
    assert n.node_pool == ""  # a GKE node pool is not a Karpenter NodePool
    skus = list(PRICES_BY_SKU)
    assert sku_for(n.sku, skus, {}) == "h100_80gb"
    assert [sku_for(a, skus, {}) for a in ("nvidia-l4", "nvidia-h200-141gb", "nvidia-b200", "nvidia-tesla-a100")] == [
        "l4", "h200_141gb", "b200", None  # the 40 GB A100 is no catalog SKU
    ]  # fmt: skip


def test_an_aks_node_without_feature_discovery_is_known_by_its_vm_size() -> None:
    """AKS's own GPU node pools carry no ``nvidia.com/gpu.product`` either, only the VM size as the instance type;
    a mapped GPU instance type of any of the three clouds names its SKU, and the scale set's spot priority is spot.
    An instance type gpufleet does not map gets no SKU."""
    from gpufleet.domain.catalog import PRICES_BY_SKU, sku_for

    def node(instance_type: str, gpus: str = "8", **labels: str) -> dict[str, object]:
        return {"metadata": {"name": "aks-nd-1", "labels": {"node.kubernetes.io/instance-type": instance_type,
                                                             "kubernetes.azure.com/accelerator": "nvidia", **labels}},
                "status": {"allocatable": {"cpu": "96", "memory": "1800Gi", "nvidia.com/gpu": gpus}}}  # fmt: skip

    aks = node_from_json(node("Standard_ND96isr_H100_v5", **{"kubernetes.azure.com/scalesetpriority": "spot"}),
                         TopologyIds())  # fmt: skip
    skus = list(PRICES_BY_SKU)
    assert (sku_for(aks.sku, skus, {}), aks.capacity_type, aks.spec.gpu_count) == ("h100_80gb", "spot", 8)
    assert [sku_for(node_from_json(node(t), TopologyIds()).sku, skus, {}) for t in
            ("p5en.48xlarge", "a2-ultragpu-8g", "Standard_ND96amsr_A100_v4")] == ["h200_141gb", "a100_80gb",
                                                                                  "a100_80gb"]  # fmt: skip
    assert node_from_json(node("Standard_D4s_v5"), TopologyIds()).sku == ""  # not a GPU size gpufleet maps
    labelled = node_from_json(node("p5.48xlarge", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), TopologyIds())
    assert labelled.sku == "NVIDIA-H100-80GB-HBM3"  # feature discovery's label comes first
