"""A real kube-apiserver v1.20.2 + etcd for the whole session (started once: ~5-10 s), with the Kueue and
Karpenter CRDs installed from ../shared/k8s/crds. Every test here carries the ``k8s`` marker and skips
cleanly when ../shared/k8s or etcd is absent. Each test gets its own namespace(s) and node-name prefix.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet
from gpufleet.adapters.kubernetes.localcluster import LocalCluster, install_crds, load_crds, start_local_cluster
from gpufleet.adapters.kubernetes.rest import Kube

REPO = Path(__file__).resolve().parents[3]
SHARED_K8S = (REPO.parent / "shared" / "k8s").resolve()
APISERVER_XZ = SHARED_K8S / "kube-apiserver-v1.20.2.xz"
CRD_DIRS = [SHARED_K8S / "crds" / "kueue-v0.19.2", SHARED_K8S / "crds" / "karpenter-v1.14.1"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/k8s/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.k8s)


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    if not APISERVER_XZ.is_file():
        pytest.skip("../shared/k8s/kube-apiserver-v1.20.2.xz is absent")
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (scripts/install-system-deps.sh installs etcd-server)")
    c = start_local_cluster(APISERVER_XZ)
    try:
        install_crds(c, load_crds(CRD_DIRS))
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def kubeconfig(cluster: LocalCluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture
def kube(kubeconfig: Path) -> Iterator[Kube]:
    k = Kube.from_kubeconfig(str(kubeconfig))
    yield k
    k.close()


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name


@pytest.fixture
def kubelet(kube: Kube) -> Iterator[FakeKubelet]:
    k = FakeKubelet(kube)
    yield k
    k.stop()
    k.remove_nodes()
