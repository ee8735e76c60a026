"""A real kube-apiserver for the deployment tests: v1.20.2 from ../shared/k8s on Debian's etcd, on loopback, with a
token for an admin (the flags of ../shared/k8s/README.md). Used by the manifests' test (the objects applied, the
ServiceAccounts' permissions) and the image's (the controller run from the image against it)."""

from __future__ import annotations

import lzma
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
APISERVER_XZ = REPO.parent / "shared" / "k8s" / "kube-apiserver-v1.20.2.xz"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpufleet-k8s"
KUBECTL = shutil.which("kubectl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(check: Any, what: str, timeout_s: float, procs: list[subprocess.Popen[bytes]], log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"{what}: a process exited: {log.read_text()[-2000:]}")
        if check():
            return
        time.sleep(0.25)
    raise RuntimeError(f"{what} not ready in {timeout_s} s: {log.read_text()[-2000:]}")


def start_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """etcd + kube-apiserver on loopback (flags of ../shared/k8s/README.md); yields an admin kubeconfig."""
    etcd = shutil.which("etcd")
    if not APISERVER_XZ.is_file() or etcd is None or KUBECTL is None or shutil.which("openssl") is None:
        pytest.skip("needs ../shared/k8s/kube-apiserver-v1.20.2.xz, etcd (etcd-server), kubectl and openssl")
    CACHE.mkdir(parents=True, exist_ok=True)
    binary = CACHE / "kube-apiserver-v1.20.2"
    if not binary.exists():
        part = binary.with_suffix(".part")
        part.write_bytes(lzma.decompress(APISERVER_XZ.read_bytes()))
        part.chmod(0o755)
        part.rename(binary)
    d = tmp_path_factory.mktemp("k8s")
    pki = d / "pki"
    pki.mkdir()
    token = secrets.token_hex(16)
    (pki / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
    subprocess.run(["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"], capture_output=True, check=True)
    p1, p2, p3 = _free_port(), _free_port(), _free_port()
    log = d / "k8s.log"
    out = log.open("ab")
    procs = [
        subprocess.Popen(
            [etcd, "--name", "t", "--data-dir", str(d / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{p1}", "--advertise-client-urls", f"http://127.0.0.1:{p1}",
             "--listen-peer-urls", f"http://127.0.0.1:{p2}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p2}",
             "--initial-cluster", f"t=http://127.0.0.1:{p2}"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    ]  # fmt: skip
    try:
        procs.append(
            subprocess.Popen(
                [str(binary), f"--etcd-servers=http://127.0.0.1:{p1}", "--bind-address=127.0.0.1",
                 f"--secure-port={p3}", f"--cert-dir={pki}", f"--token-auth-file={pki / 'tokens.csv'}",
                 "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
                 f"--service-account-key-file={pki / 'sa.key'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
                 "--api-audiences=https://kubernetes.default.svc", "--service-cluster-ip-range=10.96.0.0/16",
                 "--advertise-address=127.0.0.1", "--disable-admission-plugins=ServiceAccount"],
                stdout=out, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        config = d / "kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1", "kind": "Config", "current-context": "t",
                    "clusters": [{"name": "t", "cluster": {"server": f"https://127.0.0.1:{p3}",
                                                           "insecure-skip-tls-verify": True}}],
                    "users": [{"name": "admin", "user": {"token": token}}],
                    "contexts": [{"name": "t", "context": {"cluster": "t", "user": "admin"}}],
                }
            )
        )  # fmt: skip

        def ready() -> bool:
            r = subprocess.run(
                [KUBECTL, "--kubeconfig", str(config), "get", "--raw", "/readyz"], capture_output=True, check=False
            )
            return r.returncode == 0

        _wait(ready, "kube-apiserver", 90, procs, log)
        yield config
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        out.close()


def kubectl(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(config), *args], input=stdin, capture_output=True, text=True, check=False
    )
