"""Review (deploy): deploy/kubernetes/rbac.yaml, the standalone RBAC of ``gpufleet controller`` (docs/kubernetes.md,
"RBAC"), applied to the real kube-apiserver v1.20.2 and asked, as its ServiceAccount, what it may do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.apiserver import kubectl, start_apiserver

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "kubernetes" / "rbac.yaml"
SA = "system:serviceaccount:kube-system:gpufleet"


@pytest.fixture(scope="module")
def kubeconfig() -> Iterator[Path]:
    yield from start_apiserver()


def _can(config: Path, namespace: str, *what: str) -> str:
    r = kubectl(config, "auth", "can-i", *what, f"--as={SA}", "-n", namespace)
    return r.stdout.strip()


@pytest.mark.k8s
@pytest.mark.slow
def test_the_controllers_service_account_holds_its_own_lease_only(kubeconfig: Path) -> None:
    """Review (fixed), the defect: the ClusterRole granted ``leases: get, create, update`` cluster-wide, where the
    controller uses one Lease (``--lease-name``, default ``gpufleet-controller``, in ``--lease-namespace``, default
    ``kube-system``). Its token could rewrite ``kube-system/kube-scheduler`` and ``kube-controller-manager`` (take
    over their leader election) and every node's heartbeat in ``kube-node-lease`` (make a dead node look alive, or a
    live one dead). The kustomize install already granted the Lease in its own namespace only, by name. Now
    rbac.yaml does the same (a Role in kube-system)."""
    applied = kubectl(kubeconfig, "apply", "-f", str(RBAC))
    assert applied.returncode == 0, applied.stderr
    # what the controller needs: its own Lease in its namespace (create cannot be limited by name)
    assert _can(kubeconfig, "kube-system", "get", "leases/gpufleet-controller") == "yes"
    assert _can(kubeconfig, "kube-system", "update", "leases/gpufleet-controller") == "yes"
    assert _can(kubeconfig, "kube-system", "create", "leases") == "yes"
    # what it must not: other components' leader Leases and the nodes' heartbeats
    assert _can(kubeconfig, "kube-system", "update", "leases/kube-scheduler") == "no"
    assert _can(kubeconfig, "kube-system", "update", "leases/kube-controller-manager") == "no"
    assert _can(kubeconfig, "kube-node-lease", "update", "leases/node-1") == "no"
    assert _can(kubeconfig, "default", "create", "leases") == "no"
    # the rest of the documented rules still hold
    assert _can(kubeconfig, "default", "create", "pods", "--subresource=binding") == "yes"
    assert _can(kubeconfig, "kube-system", "create", "pods") == "yes"  # the start buffer's placeholders
    assert _can(kubeconfig, "default", "create", "pods") == "no"
    assert _can(kubeconfig, "default", "get", "secrets") == "no"


@pytest.mark.k8s
@pytest.mark.slow
def test_the_service_account_may_keep_the_moves_ledger_on_its_own_namespace_only(kubeconfig: Path) -> None:
    """Review (fixed, k8s): consolidation's moves ledger (an annotation on the Lease's Namespace) needs ``get`` and
    ``patch`` of that Namespace, ``kube-system``, and of no other; replica scaling patches ``deployments`` (its
    record in the same update), no longer ``deployments/scale``."""
    applied = kubectl(kubeconfig, "apply", "-f", str(RBAC))
    assert applied.returncode == 0, applied.stderr
    assert _can(kubeconfig, "default", "get", "namespaces/kube-system") == "yes"
    assert _can(kubeconfig, "default", "patch", "namespaces/kube-system") == "yes"
    assert _can(kubeconfig, "default", "patch", "namespaces/default") == "no"
    assert _can(kubeconfig, "default", "delete", "namespaces/kube-system") == "no"
    assert _can(kubeconfig, "default", "patch", "deployments") == "yes"
    assert _can(kubeconfig, "default", "patch", "deployments", "--subresource=scale") == "no"
