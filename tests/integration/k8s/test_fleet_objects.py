"""Kueue and Karpenter objects compiled from quotas and procurement: accepted by the real API server with the
CRDs installed, and clean against the CRD schemas and CEL rules offline; broken objects are refused offline."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.fleetobjects import (
    TierCapacity,
    collection_path,
    flavor_name,
    karpenter_objects,
    kueue_objects,
)
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.schedule.quota import TeamQuota
from tests.integration.k8s.conftest import SHARED_K8S
from tests.integration.k8s.crdcheck import check

H100 = "NVIDIA-H100-80GB-HBM3"
CRD = {
    "ResourceFlavor": "kueue-v0.19.2/kueue.x-k8s.io_resourceflavors.yaml",
    "Cohort": "kueue-v0.19.2/kueue.x-k8s.io_cohorts.yaml",
    "ClusterQueue": "kueue-v0.19.2/kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue-v0.19.2/kueue.x-k8s.io_localqueues.yaml",
    "NodePool": "karpenter-v1.14.1/karpenter.sh_nodepools.yaml",
}


def _crd(kind: str) -> Path:
    path = SHARED_K8S / "crds" / CRD[kind]
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def _objects(ns: str) -> list[dict[str, object]]:
    tiers = [TierCapacity(H100, "reserved", 64), TierCapacity(H100, "on-demand", 128), TierCapacity(H100, "spot", 256)]
    quotas = [
        TeamQuota("research", f"co-{ns}", flavor_name(H100, "reserved"), 32, borrowing_limit_gpus=16),
        TeamQuota("research", f"co-{ns}", flavor_name(H100, "on-demand"), 16),
        TeamQuota("research", f"co-{ns}", flavor_name(H100, "spot"), 64),
        TeamQuota("serving", f"co-{ns}", flavor_name(H100, "reserved"), 32, lending_limit_gpus=8),
        TeamQuota("serving", f"co-{ns}", flavor_name(H100, "on-demand"), 32),
    ]
    return kueue_objects(quotas, tiers, {ns: "research"}) + karpenter_objects(tiers)


def test_emitted_objects_pass_the_offline_schema_and_cel_check() -> None:
    objs = _objects("offline")
    total_rules = 0
    for o in objs:
        rep = check(o, _crd(str(o["kind"])))
        assert rep.ok, (o["kind"], rep.errors)
        total_rules += rep.rules_checked
    assert total_rules >= 10  # CEL rules really evaluated, not skipped
    cq = next(o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "research")  # type: ignore[index]
    names = [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]]  # type: ignore[index]
    assert [n.rsplit("-", 1)[-1] if not n.endswith("on-demand") else "on-demand" for n in names] == [
        "reserved",
        "spot",
        "on-demand",
    ]  # fmt: skip  (checkpointable work, which alone tolerates spot's taint, tries spot before on demand)
    pools = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "NodePool"}  # type: ignore[index]
    assert [p["weight"] for p in pools.values()] == [100, 10, 50]  # type: ignore[index]
    assert pools[flavor_name(H100, "spot")]["limits"] == {"nvidia.com/gpu": "256"}  # type: ignore[index]


def test_broken_objects_are_refused_by_the_offline_check() -> None:
    objs = _objects("broken")
    cq = copy.deepcopy(next(o for o in objs if o["kind"] == "ClusterQueue"))
    cq["spec"]["resourceGroups"][0]["coveredResources"] = ["nvidia.com/gpu", "cpu"]  # type: ignore[index]
    rep = check(cq, _crd("ClusterQueue"))  # only a CEL rule catches this (flavors must cover both)
    assert not rep.ok and any("CEL" in e for e in rep.errors), rep.errors
    pool = copy.deepcopy(next(o for o in objs if o["kind"] == "NodePool"))
    reqs = pool["spec"]["template"]["spec"]["requirements"]  # type: ignore[index]
    reqs.append({"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]})
    rep = check(pool, _crd("NodePool"))
    assert not rep.ok and any("CEL" in e for e in rep.errors), rep.errors
    pool2 = copy.deepcopy(next(o for o in objs if o["kind"] == "NodePool"))
    pool2["spec"]["disruption"]["consolidationPolicy"] = "Sometimes"  # type: ignore[index]
    pool2["spec"]["surprise"] = 1  # type: ignore[index]  # 1.20 would silently prune this
    rep = check(pool2, _crd("NodePool"))
    assert len(rep.errors) >= 2, rep.errors


def test_emitted_objects_are_accepted_by_the_api_server(kube: Kube, ns: str) -> None:
    act = Actuator(kube)
    for o in _objects(ns):
        if o["kind"] in ("NodePool", "ResourceFlavor", "ClusterQueue"):
            o["metadata"]["name"] = f"{o['metadata']['name']}-{ns}"[:63]  # type: ignore[index]
        assert act.apply_object(collection_path(o), o, "quota_compiled") == "applied", act.audit[-1]
    assert act.apply_object(collection_path(o), o, "quota_compiled") == "applied"  # re-apply = update
    got = kube.get(f"/apis/karpenter.sh/v1/nodepools/{o['metadata']['name']}")  # type: ignore[index]
    assert got["spec"]["limits"] == o["spec"]["limits"]  # type: ignore[index]


SPEC = """
tiers:
  - {sku: NVIDIA-H100-80GB-HBM3, tier: reserved, gpus: 64, instance_families: [p5]}
  - {sku: NVIDIA-H100-80GB-HBM3, tier: spot, gpus: 128}
quotas:
  - {team: SUFFIX-a, cohort: co-SUFFIX, sku: NVIDIA-H100-80GB-HBM3, tier: reserved, nominal_gpus: 32, borrowing_limit_gpus: 8}
  - {team: SUFFIX-a, cohort: co-SUFFIX, sku: NVIDIA-H100-80GB-HBM3, tier: spot, nominal_gpus: 64}
namespaces: {NS: SUFFIX-a}
"""


def test_quotas_cli_applies_a_fleet_spec_and_rejects_bad_ones(
    kube: Kube, ns: str, kubeconfig: Path, tmp_path: Path
) -> None:
    import subprocess
    import sys

    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.replace("SUFFIX", ns).replace("NS", ns))
    run = [sys.executable, "-m", "gpufleet", "k8s", "quotas", str(spec)]
    r = subprocess.run(
        [*run, "--apply", "--kubeconfig", str(kubeconfig)], check=False, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("applied: ") == 2 + 1 + 1 + 1 + 2  # flavors, cohort, queue, local queue, pools
    assert kube.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{ns}-a")["spec"]["cohortName"] == f"co-{ns}"
    spec.write_text(SPEC.replace("SUFFIX", ns).replace("NS", ns).replace("nominal_gpus: 64", "nominal_gpus: -1"))
    r = subprocess.run(run, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "quotas[1].nominal_gpus" in r.stderr and "Traceback" not in r.stderr


def test_where_gpufleet_releases_nodes_karpenter_never_empties_the_launched_tiers(
    kube: Kube, ns: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """``release: gpufleet`` (the controller's --release-every-s releases idle launched nodes with the loop's node
    scaler): the on-demand and spot NodePools carry consolidateAfter Never (valid for the CRD, offline and on the
    API server), reserved keeps Karpenter's WhenEmpty; a release value that means nothing is refused by name."""
    import subprocess
    import sys

    tiers = [TierCapacity(H100, "reserved", 64), TierCapacity(H100, "on-demand", 128), TierCapacity(H100, "spot", 256)]
    pools = {p["metadata"]["name"]: p for p in karpenter_objects(tiers, gpufleet_releases=True)}  # type: ignore[index]
    after = {name: p["spec"]["disruption"]["consolidateAfter"] for name, p in pools.items()}  # type: ignore[index]
    assert after == {flavor_name(H100, "reserved"): "300s", flavor_name(H100, "on-demand"): "Never",
                     flavor_name(H100, "spot"): "Never"}  # fmt: skip
    for p in pools.values():
        rep = check(p, _crd("NodePool"))
        assert rep.ok, rep.errors
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.replace("SUFFIX", ns).replace("NS", ns) + "release: gpufleet\n")
    run = [sys.executable, "-m", "gpufleet", "k8s", "quotas", str(spec)]
    r = subprocess.run(
        [*run, "--apply", "--kubeconfig", str(kubeconfig)], check=False, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    got = kube.get(f"/apis/karpenter.sh/v1/nodepools/{flavor_name(H100, 'spot')}")
    disruption = got["spec"]["disruption"]  # the API server adds the CRD's default budget
    assert (disruption["consolidationPolicy"], disruption["consolidateAfter"]) == ("WhenEmpty", "Never")
    spec.write_text(SPEC.replace("SUFFIX", ns).replace("NS", ns) + "release: sometimes\n")
    r = subprocess.run(run, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "release" in r.stderr and "Traceback" not in r.stderr
