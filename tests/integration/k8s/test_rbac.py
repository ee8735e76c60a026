"""The ClusterRole in deploy/kubernetes/rbac.yaml is enough for the controller and no more: a controller
authenticated as the ServiceAccount (TokenRequest) binds pods; the same token cannot create pods. The kustomize
install's roles are enough too."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import ControllerConfig
from gpufleet.adapters.kubernetes.deployment_json import deployment_from_json
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import ApiError, Kube, KubeConfig
from gpufleet.adapters.kubernetes.workloads import read_own_writes
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for

RBAC = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "rbac.yaml"
KUSTOMIZE_EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "kustomize" / "overlays" / "example"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def _as_service_account(kube: Kube, ns: str, sa: str) -> Kube:
    """A client authenticated as the ServiceAccount (a TokenRequest)."""
    tr = kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                   {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})  # fmt: skip
    return Kube(KubeConfig(kube.cfg.server, tr["status"]["token"], verify_tls=False))


def _three_pods(kube: Kube, kubelet: FakeKubelet, ns: str, prefix: str) -> str:
    """An 8-GPU node and three 1-GPU pods for scheduler ``gpufleet-<prefix>`` (returned)."""
    kubelet.register([FakeNode(f"{prefix}-0", gpus=8)])
    kubelet.start()
    sched = f"gpufleet-{prefix}"
    for i in range(3):
        create_pod(kube, ns, pod_body(f"p{i}", PodRequest("x", 1000, 1024, 1, 1000), sched))
    return sched


def test_controller_runs_with_the_documented_cluster_role(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    suffix = uuid.uuid4().hex[:5]
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    sa, role, binding = docs[:3]  # the rest: the Lease and the start buffer's pods, in kube-system only
    lease_role, lease_binding = (d for d in docs if d["metadata"]["name"] == "gpufleet-controller-lease")
    sa["metadata"]["namespace"] = ns
    role["metadata"]["name"] = binding["roleRef"]["name"] = binding["metadata"]["name"] = f"gpufleet-{suffix}"
    binding["subjects"][0]["namespace"] = ns
    kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts", sa)
    kube.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    kube.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    sched = f"gpufleet-rb{suffix}"
    for d in (lease_role, lease_binding):  # the Lease Role, moved to the test's namespace and Lease name
        d["metadata"]["namespace"] = ns
    lease_role["rules"][1]["resourceNames"] = [f"l-{sched}"]
    lease_binding["subjects"][0]["namespace"] = ns
    kube.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", lease_role)
    kube.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", lease_binding)
    sa_kube = _as_service_account(kube, ns, "gpufleet")
    assert _three_pods(kube, kubelet, ns, f"rb{suffix}") == sched
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{sched}", events=True)
    with running_controller(sa_kube, cfg) as ctl:
        assert wait_for(lambda: all(p["spec"].get("nodeName") for p in pods_in(kube, ns)), 30), ctl.act.audit
    with pytest.raises(ApiError) as err:
        create_pod(sa_kube, ns, pod_body("nope", PodRequest("x", 1000, 1024), sched))
    assert err.value.status == 403
    # replica scaling: patch the Deployment (its replicas and gpufleet's record of them), then read its own write
    # back (the view may lag it)
    deps = f"/apis/apps/v1/namespaces/{ns}/deployments"
    kube.post(deps, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
                         "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})  # fmt: skip
    stale = deployment_from_json(kube.get(f"{deps}/web"))
    assert Actuator(sa_kube).scale(ns, "web", 3, "forecast", expect=1) == "applied"
    assert [d.replicas for d in read_own_writes(sa_kube, [stale], {(ns, "web"): 3})] == [3]
    sa_kube.close()


def test_controller_runs_with_the_kustomize_installs_roles(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """The ServiceAccount, ClusterRole and Roles `kubectl apply -k deploy/kustomize/overlays/example` creates (rendered
    here, moved to the test's namespace): the controller starts with them (its informers list and watch nodes, pods,
    Deployments, Kueue Workloads and Karpenter NodePools) and binds pods."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (which bundles kustomize) is not installed")
    out = subprocess.run([kubectl, "kustomize", str(KUSTOMIZE_EXAMPLE)], capture_output=True, text=True, check=True)
    suffix = uuid.uuid4().hex[:5]
    objs = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] in RBAC_KINDS]
    for d in objs:
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["name"] = f"gpufleet-controller-{suffix}"
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] = f"gpufleet-controller-{suffix}"
        for subject in d.get("subjects", []):
            subject["namespace"] = ns
        d["metadata"].pop("namespace", None)
        d["metadata"].pop("labels", None)
    paths = {"ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts",
             "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
             "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
             "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
             "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}  # fmt: skip
    for d in objs:
        kube.post(paths[d["kind"]], d)
    sa_kube = _as_service_account(kube, ns, "gpufleet-controller")
    sched = _three_pods(kube, kubelet, ns, f"kz{suffix}")
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name="gpufleet-controller", events=True)
    with running_controller(sa_kube, cfg) as ctl:
        assert ctl.view.workloads is not None and ctl.view.node_pools is not None  # the CRDs are served and read
        assert wait_for(lambda: all(p["spec"].get("nodeName") for p in pods_in(kube, ns)), 30), ctl.act.audit
    assert not ctl.error
    sa_kube.close()
