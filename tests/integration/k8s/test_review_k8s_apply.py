"""Review (k8s): ``gpufleet k8s quotas --apply`` (``Actuator.apply_object``) over objects that already exist on the real
API server: what others put on them, and objects gpufleet did not create."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.kubernetes.act import MANAGED_BY, Actuator
from gpufleet.adapters.kubernetes.fleetobjects import collection_path, resource_flavor
from gpufleet.adapters.kubernetes.rest import Kube

H100 = "NVIDIA-H100-80GB-HBM3"


def _flavor(name: str) -> dict[str, Any]:
    o = resource_flavor(H100, "spot")
    o["metadata"]["name"] = name
    return o


def test_a_reapply_keeps_what_others_put_on_the_object(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: a re-apply (``gpufleet k8s quotas --apply`` after a fleet spec change) PUT the
    emitted object with only its resourceVersion from the one in the cluster: every finalizer (Kueue's
    ``resource-in-use`` on flavors and ClusterQueues, its protection against deleting what workloads use), every label
    and annotation others had put on it (a GitOps tool's tracking id) was removed. Now the object read is replaced
    in its spec, its metadata kept with gpufleet's labels set over it."""
    act = Actuator(kube)
    o = _flavor(f"rf-{ns}")
    path = collection_path(o)
    assert act.apply_object(path, o, "quotas_compiled") == "applied"
    kube.patch(f"{path}/{o['metadata']['name']}", {"metadata": {
        "finalizers": ["kueue.x-k8s.io/resource-in-use"], "labels": {"team": "ml"},
        "annotations": {"argocd.argoproj.io/tracking-id": "fleet:kueue/ResourceFlavor"}}})  # fmt: skip
    o2 = _flavor(f"rf-{ns}")
    o2["spec"]["nodeLabels"]["extra"] = "1"
    assert act.apply_object(path, o2, "quotas_compiled") == "applied"
    got = kube.get(f"{path}/{o['metadata']['name']}")
    meta = got["metadata"]
    assert meta.get("finalizers") == ["kueue.x-k8s.io/resource-in-use"]
    assert meta["labels"] == {"team": "ml", MANAGED_BY: "gpufleet"}
    assert meta["annotations"] == {"argocd.argoproj.io/tracking-id": "fleet:kueue/ResourceFlavor"}
    assert got["spec"]["nodeLabels"]["extra"] == "1"
    kube.patch(f"{path}/{o['metadata']['name']}", {"metadata": {"finalizers": None}})


def test_an_object_gpufleet_did_not_create_is_not_replaced_unless_adopted(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: an existing object of the name gpufleet emits (an administrator's ClusterQueue
    named like a team, a NodePool or flavor of the same name) was silently replaced by gpufleet's. Now every emitted
    object carries ``app.kubernetes.io/managed-by: gpufleet`` (the Kueue ones did not) and one without it is left
    as it is, outcome ``not_ours`` (the CLI exits 1), unless ``--adopt``."""
    theirs = _flavor(f"admin-{ns}")
    theirs["spec"] = {"nodeLabels": {"pool": "admins"}}
    theirs["metadata"].pop("labels", None)
    path = collection_path(theirs)
    kube.post(path, theirs)  # an administrator's flavor, by the name gpufleet's would take
    act = Actuator(kube)
    assert act.apply_object(path, _flavor(f"admin-{ns}"), "quotas_compiled") == "not_ours"
    assert kube.get(f"{path}/admin-{ns}")["spec"]["nodeLabels"] == {"pool": "admins"}
    assert act.audit[-1]["outcome"] == "not_ours" and "adopt" in act.audit[-1]["message"]
    assert act.apply_object(path, _flavor(f"admin-{ns}"), "quotas_compiled", adopt=True) == "applied"
    got = kube.get(f"{path}/admin-{ns}")
    assert got["spec"]["nodeLabels"]["karpenter.sh/capacity-type"] == "spot"
    assert got["metadata"]["labels"][MANAGED_BY] == "gpufleet"
