"""The Kustomize manifests in deploy/kustomize: they render (kubectl kustomize), validate offline against the
Kubernetes schemas (kubernetes-validate, strict, oldest and newest version it ships), state what the issue asks
(replicas, HPA, probes, Secret, non-root, least privilege), and apply to a real kube-apiserver (v1.20.2 from
../shared/k8s on Debian's etcd), where the Deployments, Job, RBAC objects and Service are found and the
ServiceAccounts hold exactly the permissions meant for them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.apiserver import KUBECTL, kubectl, start_apiserver

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "kustomize" / "overlays" / "example"
EXTRAS = REPO / "deploy" / "kustomize" / "extras"
NS = "gpufleet"

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (which bundles kustomize) is not installed")


def _render(overlay: Path = OVERLAY) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _by_kind(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


@needs_kubectl
def test_manifests_validate_offline_against_the_kubernetes_schemas() -> None:
    import kubernetes_validate

    docs = _render()
    for version in ("1.25.0", kubernetes_validate.latest_version()):
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError naming the field
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert kinds == [
        "ClusterRole/gpufleet-controller", "ClusterRoleBinding/gpufleet-controller", "ConfigMap/gpufleet-config",
        "Deployment/gpufleet-api", "Deployment/gpufleet-controller", "HorizontalPodAutoscaler/gpufleet-api",
        "Job/gpufleet-migrate", "Namespace/gpufleet", "Role/gpufleet-buffer", "Role/gpufleet-controller-lease",
        "RoleBinding/gpufleet-buffer", "RoleBinding/gpufleet-controller-lease", "Service/gpufleet-api",
        "ServiceAccount/gpufleet-api",
        "ServiceAccount/gpufleet-controller",
    ]  # fmt: skip
    monitor = yaml.safe_load((EXTRAS / "servicemonitor.yaml").read_text())
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]


@needs_kubectl
def test_manifests_say_what_a_production_install_needs() -> None:
    docs = _render()
    api = _by_kind(docs, "Deployment", "gpufleet-api")
    assert api["spec"]["replicas"] >= 2
    pod = api["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["serve"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    db_env = next(e for e in c["env"] if e["name"] == "GPUFLEET_DB_URL")
    assert db_env["valueFrom"]["secretKeyRef"] == {"name": "gpufleet-db", "key": "url"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    hpa = _by_kind(docs, "HorizontalPodAutoscaler", "gpufleet-api")
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["scaleTargetRef"]["name"] == "gpufleet-api"
    job = _by_kind(docs, "Job", "gpufleet-migrate")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["db", "upgrade"]
    assert job["spec"]["activeDeadlineSeconds"] > 0 and job["spec"]["backoffLimit"] > 0  # never holds a rollout forever
    # the readiness probe outwaits /readyz's own bound on the database (test_review_startup_manifests.py)
    assert c["readinessProbe"]["timeoutSeconds"] > c["livenessProbe"]["timeoutSeconds"]
    ctl = _by_kind(docs, "Deployment", "gpufleet-controller")
    (cc,) = ctl["spec"]["template"]["spec"]["containers"]
    args = cc["args"]
    assert args[0] == "controller" and "--lease-name" in args
    # the controller's liveness: /healthz on the port its --health-port opens, which the PodMonitor scrapes too
    port = int(args[args.index("--health-port") + 1])
    assert cc["ports"] == [{"name": "health", "containerPort": port}]
    assert cc["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    monitor = yaml.safe_load((EXTRAS / "podmonitor-controller.yaml").read_text())
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "health", "path": "/metrics", "interval": "30s"}]
    assert monitor["spec"]["selector"]["matchLabels"] == ctl["spec"]["selector"]["matchLabels"]
    assert ctl["spec"]["template"]["spec"]["serviceAccountName"] == "gpufleet-controller"
    text = yaml.safe_dump_all(docs)
    assert "password" not in text.lower() and "kind: Secret" not in text  # no secret shipped in the manifests


def test_the_kustomize_roles_are_the_documented_ones() -> None:
    """One RBAC definition: the kustomize base's ClusterRole and Roles have deploy/kubernetes/rbac.yaml's rules (the
    ones the controller is run with in tests/integration/k8s/test_rbac.py); both grant the Lease (by name) and the
    start buffer's pod creation in the controller's own namespace only."""
    documented = [d for d in yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "rbac.yaml").read_text()) if d]
    base = [d for d in yaml.safe_load_all((OVERLAY.parents[1] / "base" / "rbac.yaml").read_text()) if d]
    role = next(d for d in base if d["kind"] == "ClusterRole")
    assert role["rules"] == next(d for d in documented if d["kind"] == "ClusterRole")["rules"]
    assert not any("coordination.k8s.io" in r["apiGroups"] for r in role["rules"])  # never every Lease of the cluster
    roles = {d["metadata"]["name"]: d["rules"] for d in base if d["kind"] == "Role"}
    assert roles == {d["metadata"]["name"]: d["rules"] for d in documented if d["kind"] == "Role"}
    assert roles["gpufleet-buffer"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    assert {v for r in roles["gpufleet-controller-lease"] for v in r["verbs"]} == {"create", "get", "update"}


@needs_kubectl
def test_the_store_linked_overlay_gives_the_controller_the_store_from_the_secret() -> None:
    """overlays/store-linked: the example, with the controller syncing inventory and metering usage into the store;
    the store's URL comes from the API's Secret as an env var (the CLI reads GPUFLEET_DB_URL with --cluster), never
    on the command line."""
    import kubernetes_validate

    docs = _render(OVERLAY.parent / "store-linked")
    for doc in docs:
        kubernetes_validate.validate(doc, "1.25.0", strict=True)
    assert sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs) == sorted(
        f"{d['kind']}/{d['metadata']['name']}" for d in _render()
    )
    (c,) = _by_kind(docs, "Deployment", "gpufleet-controller")["spec"]["template"]["spec"]["containers"]
    args = c["args"]
    assert args[:2] == ["controller", "--in-cluster"] and "--lease-name" in args and "--identity" in args
    assert args[args.index("--cluster") + 1] == "prod-1" and args[args.index("--meter-every-s") + 1] == "30"
    assert args[args.index("--health-port") + 1] == "8081"  # the patch replaces the args: the probe's port stays
    assert args[args.index("--node-limits-every-s") + 1] == "300"
    assert "--db" not in args and not any("postgresql" in a for a in args)
    env = {e["name"]: e for e in c["env"]}
    assert env["GPUFLEET_DB_URL"]["valueFrom"]["secretKeyRef"] == {"name": "gpufleet-db", "key": "url"}
    assert {"POD_NAMESPACE", "POD_NAME"} <= set(env)


@needs_kubectl
def test_the_documented_copies_render(tmp_path: Path) -> None:
    """docs/deploy.md's steps: copy the example next to it as ``mine``, copy store-linked as ``mine-linked`` and point
    it at ``mine``; both render (the base is two levels up from an overlay)."""
    tree = tmp_path / "kustomize"
    shutil.copytree(OVERLAY.parents[1], tree)
    overlays = tree / "overlays"
    shutil.copytree(overlays / "example", overlays / "mine")
    shutil.copytree(overlays / "store-linked", overlays / "mine-linked")
    k = overlays / "mine-linked" / "kustomization.yaml"
    k.write_text(k.read_text().replace("../example", "../mine"))
    assert _render(overlays / "mine") == _render()
    assert _render(overlays / "mine-linked") == _render(OVERLAY.parent / "store-linked")


# ---- a real API server ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kubeconfig() -> Iterator[Path]:
    yield from start_apiserver()


@pytest.mark.k8s
@pytest.mark.slow
def test_manifests_apply_to_a_real_api_server_with_least_privilege(kubeconfig: Path) -> None:
    rendered = yaml.safe_dump_all(_render())
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=rendered)
    assert applied.returncode == 0, applied.stderr
    got = kubectl(kubeconfig, "-n", NS, "get", "deployments,jobs,services,serviceaccounts,roles,rolebindings,"
                   "horizontalpodautoscalers,configmaps", "-o", "json")  # fmt: skip
    assert got.returncode == 0, got.stderr
    names = {f"{i['kind']}/{i['metadata']['name']}" for i in json.loads(got.stdout)["items"]}
    for want in (
        "Deployment/gpufleet-api", "Deployment/gpufleet-controller", "Job/gpufleet-migrate", "Service/gpufleet-api",
        "ServiceAccount/gpufleet-api", "ServiceAccount/gpufleet-controller", "Role/gpufleet-controller-lease",
        "RoleBinding/gpufleet-controller-lease", "HorizontalPodAutoscaler/gpufleet-api",
    ):  # fmt: skip
        assert want in names, (want, sorted(names))
    cluster = kubectl(kubeconfig, "get", "clusterroles,clusterrolebindings", "-o", "json")
    cluster_names = {f"{i['kind']}/{i['metadata']['name']}" for i in json.loads(cluster.stdout)["items"]}
    assert {"ClusterRole/gpufleet-controller", "ClusterRoleBinding/gpufleet-controller"} <= cluster_names
    api = json.loads(kubectl(kubeconfig, "-n", NS, "get", "deployment", "gpufleet-api", "-o", "json").stdout)
    assert api["spec"]["replicas"] == 3  # the overlay's value over the base's 2

    def can(sa: str, *what: str) -> str:
        r = kubectl(kubeconfig, "auth", "can-i", *what, f"--as=system:serviceaccount:{NS}:{sa}", "-n", NS)
        return r.stdout.strip()

    # the controller may bind and evict pods and hold its Lease; nothing else
    assert can("gpufleet-controller", "create", "pods", "--subresource=binding") == "yes"
    assert can("gpufleet-controller", "create", "pods", "--subresource=eviction") == "yes"
    assert can("gpufleet-controller", "update", "leases/gpufleet-controller") == "yes"
    assert can("gpufleet-controller", "update", "leases/someone-else") == "no"
    assert can("gpufleet-controller", "delete", "pods") == "yes"  # a gang's rollback (docs/kubernetes.md, RBAC)
    assert can("gpufleet-controller", "create", "pods") == "yes"  # the start buffer's placeholders, here only
    r = kubectl(kubeconfig, "auth", "can-i", "create", "pods", f"--as=system:serviceaccount:{NS}:gpufleet-controller",
                 "-n", "default")  # fmt: skip
    assert r.stdout.strip() == "no"
    assert can("gpufleet-controller", "create", "secrets") == "no"
    assert can("gpufleet-controller", "get", "secrets") == "no"
    # the API and the migration Job need no Kubernetes permission at all
    assert can("gpufleet-api", "get", "pods") == "no"
    assert can("gpufleet-api", "get", "secrets") == "no"
