"""A real kube-apiserver + etcd on loopback, for tests, benchmarks and demos (no kubelet, no scheduler).

The apiserver binary ships xz-compressed in ``../shared/k8s`` (see its README); it is unpacked once into a
cache directory outside the repository (``~/.cache/gpufleet/k8s`` unless ``GPUFLEET_CACHE`` says otherwise).
etcd comes from Debian (``etcd-server``, installed by scripts/install-system-deps.sh).

Contract: :func:`start_local_cluster` returns a running :class:`LocalCluster` whose ``/readyz`` answered 200,
with a kubeconfig (token auth, ``system:masters``) written under its state directory; :meth:`LocalCluster.stop`
terminates both processes (SIGTERM, then SIGKILL after 5 s) and removes the state directory.
CRDs are installed with :func:`install_crds` (the Kueue ``workloads`` CRD is patched as the README says).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpufleet.domain.errors import ValidationError

# libyaml's parser when PyYAML was built with it (the same documents; the pure-Python one took ~2 s of CPU for the
# CRDs, at the start of every run of the Kubernetes tests)
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

APISERVER_SHA256 = "4c776fc90af303122e2160bfa85b807b99971d785d3b6597da904e0c517a1138"


def cache_dir() -> Path:
    return Path(os.environ.get("GPUFLEET_CACHE", Path.home() / ".cache" / "gpufleet")) / "k8s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unpack_apiserver(xz_path: Path) -> Path:
    """Unpack ``kube-apiserver`` next to a checksum stamp; reuse it when the stamp matches."""
    if not xz_path.is_file():
        raise ValidationError("apiserver", f"not found: {xz_path}")
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "kube-apiserver-v1.20.2"
    stamp = out_dir / "kube-apiserver-v1.20.2.sha256"
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == APISERVER_SHA256:
        return binary
    tmp = out_dir / f".kube-apiserver.{os.getpid()}"
    with tmp.open("wb") as f:
        subprocess.run(["xz", "-dc", str(xz_path)], stdout=f, check=True)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    if digest != APISERVER_SHA256:
        tmp.unlink()
        raise ValidationError("apiserver", f"sha256 {digest} does not match the README's {APISERVER_SHA256}")
    tmp.chmod(0o755)
    tmp.replace(binary)
    stamp.write_text(digest + "\n")
    return binary


@dataclass
class LocalCluster:
    state_dir: Path
    server: str
    token: str
    kubeconfig: Path
    etcd_url: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """A raw admin request (used for set-up: CRDs, readiness). Raises on HTTP errors."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:1500]
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        return json.loads(raw) if raw and raw[:1] in (b"{", b"[") else raw.decode()


def compact_etcd(cluster: LocalCluster) -> int:
    """Compact etcd's history up to its current revision (what the API server does every 5 min); returns it.

    Watches from an older resourceVersion that the watch cache does not serve then get 410 Gone."""

    def call(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(cluster.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    rev = int(call("/v3/kv/range", {"key": "L3JlZ2lzdHJ5"})["header"]["revision"])  # base64("/registry")
    call("/v3/kv/compaction", {"revision": str(rev), "physical": True})
    return rev


def write_kubeconfig(path: Path, server: str, token: str) -> None:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(cfg))


def _wait_ready(cluster: LocalCluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        for p in cluster.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args!r} exited with {p.returncode}; logs in {cluster.state_dir}")
        try:
            if cluster.request("GET", "/readyz") == "ok":
                return
        except (urllib.error.URLError, OSError, ValueError, RuntimeError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise RuntimeError(f"kube-apiserver not ready after {timeout_s} s ({last}); logs in {cluster.state_dir}")


def start_local_cluster(xz_path: Path, *, ready_timeout_s: float = 60.0) -> LocalCluster:
    """Start etcd and kube-apiserver on free loopback ports; see the module docstring for the contract."""
    etcd = shutil.which("etcd")
    if etcd is None:
        raise ValidationError("etcd", "etcd is not installed (Debian etcd-server; scripts/install-system-deps.sh)")
    binary = unpack_apiserver(xz_path)
    state = Path(tempfile.mkdtemp(prefix="gpufleet-k8s-"))
    pki = state / "pki"
    pki.mkdir()
    token = secrets.token_hex(16)
    (pki / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
    subprocess.run(["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"], check=True, capture_output=True)
    p1, p2, p3 = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{p3}"
    cluster = LocalCluster(state, server, token, state / "kubeconfig", f"http://127.0.0.1:{p1}")
    write_kubeconfig(cluster.kubeconfig, server, token)
    etcd_cmd = [
        etcd, "--name", "t", "--data-dir", str(state / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{p1}", "--advertise-client-urls", f"http://127.0.0.1:{p1}",
        "--listen-peer-urls", f"http://127.0.0.1:{p2}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p2}",
        "--initial-cluster", f"t=http://127.0.0.1:{p2}", "--unsafe-no-fsync",
    ]  # fmt: skip
    api_cmd = [
        str(binary), f"--etcd-servers=http://127.0.0.1:{p1}", "--bind-address=127.0.0.1", f"--secure-port={p3}",
        f"--cert-dir={pki}", f"--token-auth-file={pki / 'tokens.csv'}", "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={pki / 'sa.key'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}", "--api-audiences=https://kubernetes.default.svc",
        "--service-cluster-ip-range=10.96.0.0/16", "--advertise-address=127.0.0.1",
        "--disable-admission-plugins=ServiceAccount", "--max-requests-inflight=2000",
        "--max-mutating-requests-inflight=1000", "--enable-priority-and-fairness=false",
    ]  # fmt: skip
    try:
        with (state / "etcd.log").open("wb") as log:
            cluster.procs.append(subprocess.Popen(etcd_cmd, stdout=log, stderr=subprocess.STDOUT))
        with (state / "apiserver.log").open("wb") as log:
            cluster.procs.append(subprocess.Popen(api_cmd, stdout=log, stderr=subprocess.STDOUT))
        _wait_ready(cluster, ready_timeout_s)
    except BaseException:
        logs = "".join(
            (state / n).read_text(errors="replace")[-2000:]
            for n in ("etcd.log", "apiserver.log")
            if (state / n).exists()
        )
        cluster.stop()
        raise RuntimeError(f"local cluster failed to start:\n{logs}") from None
    return cluster


def _drop_empty_defaults(node: Any) -> int:
    """Remove ``default: ""`` entries (1.20 reads them as null and refuses the Kueue workloads CRD)."""
    dropped = 0
    if isinstance(node, dict):
        if node.get("default") == "":
            del node["default"]
            dropped += 1
        for v in node.values():
            dropped += _drop_empty_defaults(v)
    elif isinstance(node, list):
        for v in node:
            dropped += _drop_empty_defaults(v)
    return dropped


def _require_list_map_keys(node: Any) -> None:
    """A list-map key must have a default or be required: make keys whose default was dropped required."""
    if isinstance(node, dict):
        keys = node.get("x-kubernetes-list-map-keys")
        items = node.get("items")
        if keys and isinstance(items, dict):
            props = items.get("properties", {})
            req = items.setdefault("required", [])
            for k in keys:
                if k in props and "default" not in props[k] and k not in req:
                    req.append(k)
        for v in node.values():
            _require_list_map_keys(v)
    elif isinstance(node, list):
        for v in node:
            _require_list_map_keys(v)


def load_crds(crd_dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CRD document under ``crd_dirs`` (``*.yaml``), with the 1.20 workaround applied to workloads."""
    out: list[dict[str, Any]] = []
    for d in crd_dirs:
        for path in sorted(d.glob("*.yaml")):
            for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    if doc["metadata"]["name"] == "workloads.kueue.x-k8s.io":
                        _drop_empty_defaults(doc)
                        _require_list_map_keys(doc)
                    out.append(doc)
    return out


def install_crds(cluster: LocalCluster, crds: list[dict[str, Any]], timeout_s: float = 60.0) -> None:
    """Create each CRD and wait until every one reports ``Established``."""
    for crd in crds:
        cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + timeout_s
    pending = {c["metadata"]["name"] for c in crds}
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            got = cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = (got.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                pending.discard(name)
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"CRDs not established after {timeout_s} s: {sorted(pending)}")
