"""A real kube-apiserver for the deployment tests: ``adapters/kubernetes/localcluster.py`` (v1.20.2 from ../shared/k8s
on Debian's etcd, on loopback, an admin token), skipped with the reason where a part is missing. Used by the
manifests' test (the objects applied, the ServiceAccounts' permissions) and the image's (the controller run from the
image against it)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.localcluster import start_local_cluster

REPO = Path(__file__).resolve().parents[2]
APISERVER_XZ = REPO.parent / "shared" / "k8s" / "kube-apiserver-v1.20.2.xz"
KUBECTL = shutil.which("kubectl")


def start_apiserver() -> Iterator[Path]:
    """Yield an admin kubeconfig of a running API server; stop it afterwards."""
    if not APISERVER_XZ.is_file() or shutil.which("etcd") is None or KUBECTL is None or shutil.which("openssl") is None:
        pytest.skip("needs ../shared/k8s/kube-apiserver-v1.20.2.xz, etcd (etcd-server), kubectl and openssl")
    cluster = start_local_cluster(APISERVER_XZ)
    try:
        yield cluster.kubeconfig
    finally:
        cluster.stop()


def kubectl(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(config), *args], input=stdin, capture_output=True, text=True, check=False
    )
