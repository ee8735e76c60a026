"""Replica scaling of a Deployment and rightsizing apply/rollback, on the real API
server (no controller-manager runs, so the Deployment object itself is what changes)."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.deployment_json import deployment_from_json
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.workloads import apply_rightsizing, apply_scale, rollback_rightsizing
from gpufleet.autoscale.baselines import HpaPolicy
from gpufleet.control.replicas import decide_scale
from gpufleet.domain.workloads import ServingScaling


def _deployment(kube: Kube, ns: str, replicas: int) -> dict[str, Any]:
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "llm", "labels": {"gpufleet.io/kind": "serving"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "llm"}},
                 "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"schedulerName": "gpufleet",
                     "containers": [{"name": "srv", "image": "x", "resources": {
                         "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                         "limits": {"nvidia.com/gpu": "1"}}}]}}},
    }  # fmt: skip
    return kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments", body)


def test_scale_subresource_follows_the_replica_policy_and_guards_zero(kube: Kube, ns: str) -> None:
    dep = deployment_from_json(_deployment(kube, ns, 2))
    act = Actuator(kube)
    scaling = ServingScaling(min_replicas=1, max_replicas=8, target_rps_per_replica=10.0)
    hpa = HpaPolicy(target_utilization=0.7, scale_down_stabilization_s=None)  # the baseline loop's autoscaler
    up = decide_scale(dep, hpa, observed_rps=30.0, scaling=scaling, now_s=1000, last_scale_down_s=0)
    assert (up.desired, up.reason) == (5, "utilization")
    assert apply_scale(act, up) == "applied"
    got = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/llm")
    assert got["spec"]["replicas"] == 5
    dep = deployment_from_json(got)
    idle = decide_scale(dep, hpa, observed_rps=0.0, scaling=scaling, now_s=5000, last_scale_down_s=0)
    assert idle.desired == 1  # min_replicas=1: never to zero
    assert apply_scale(act, idle) == "applied"
    assert kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/llm/scale")["spec"]["replicas"] == 1


def test_rightsizing_apply_then_rollback_restores_requests(kube: Kube, ns: str) -> None:
    before = _deployment(kube, ns, 1)["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    act = Actuator(kube)
    assert (
        apply_rightsizing(act, ns, "llm", {"srv": {"cpu": "4", "memory": "32Gi"}}, "p95_usage_below_request")
        == "applied"
    )
    mid = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/llm")
    assert mid["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "4"
    assert "gpufleet.io/rightsizing-previous" in mid["metadata"]["annotations"]
    assert rollback_rightsizing(act, ns, "llm") == "applied"
    after = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/llm")
    assert after["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == before
    assert "gpufleet.io/rightsizing-previous" not in (after["metadata"].get("annotations") or {})
    assert rollback_rightsizing(act, ns, "llm") == "nothing_to_roll_back"
