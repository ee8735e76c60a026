"""The container image, built here from Debian packages only (``make image`` = scripts/image.sh build), runs:
it serves /healthz on the port PORT names, as a non-root user, `gpufleet db upgrade` from the image
migrates the host's PostgreSQL (a fresh schema), and `gpufleet controller` from the image takes its Lease on a real
API server with the kustomize install's ServiceAccount. Both run with a read-only root filesystem (``--read-only``,
podman's tmpfs on /tmp), as the Kubernetes manifests' ``readOnlyRootFilesystem: true`` does.

The base tarball is cached outside the repository (~/.cache/gpufleet-image) and podman caches the dependency
layer, so after the first run a rebuild only reinstalls the package (tens of seconds)."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text

from tests.deploy.apiserver import KUBECTL, kubectl, start_apiserver
from tests.deploy.conftest import PgSchema

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/gpufleet:test"
PORT = 9123
CONTROLLER_PORT = 9124
OVERLAY = REPO / "deploy" / "kustomize" / "overlays" / "example"

pytestmark = [
    # the first test's setup builds the image (_image_sh's own limit: 900 s; the first build on a fresh machine
    # makes the mmdebstrap base and downloads the locked wheels), so the suite-wide 300 s limit would cut it short
    pytest.mark.timeout(1200),
    pytest.mark.image,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("podman") is None or shutil.which("mmdebstrap") is None,
        reason="podman or mmdebstrap is not installed (scripts/install-system-deps.sh installs both)",
    ),
]


def _image_sh(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "image.sh"), *args],
        cwd=REPO,
        env={**_env(), "IMAGE": IMAGE},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


@pytest.fixture(scope="module")
def image() -> str:
    built = _image_sh("build")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return IMAGE


def test_image_user_is_non_root_and_entrypoint_is_serve(image: str) -> None:
    out = subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True, check=True)
    config = json.loads(out.stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    assert config["Cmd"] == ["serve"]
    assert not any("PASSWORD" in e.upper() or "SECRET" in e.upper() for e in config.get("Env", []))


def test_db_upgrade_from_the_image_then_serve_on_port_from_env(image: str, pg_schema: PgSchema) -> None:
    upgrade = _image_sh(
        "run", "--rm", "--read-only", "--network", "host", "-e", f"GPUFLEET_DB_URL={pg_schema.url}", image,
        "db", "upgrade",
    )  # fmt: skip
    assert upgrade.returncode == 0, upgrade.stderr[-2000:]
    assert "(empty) ->" in upgrade.stdout
    engine = create_engine(pg_schema.url)
    with engine.connect() as conn:
        revision = conn.execute(text("select version_num from alembic_version")).scalar_one()
    engine.dispose()

    name = f"gpufleet-test-{pg_schema.name}"
    started = _image_sh(
        "run", "-d", "--read-only", "--name", name, "--network", "host",
        "-e", f"PORT={PORT}", "-e", "GPUFLEET_HOST=127.0.0.1", "-e", f"GPUFLEET_DB_URL={pg_schema.url}", image,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        deadline = time.monotonic() + 90
        health: httpx.Response | None = None
        while time.monotonic() < deadline:
            try:
                health = httpx.get(f"http://127.0.0.1:{PORT}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True, check=False)
        assert health is not None, f"no answer on {PORT}: {logs.stdout[-1500:]}{logs.stderr[-1500:]}"
        assert health.json() == {"status": "ok"}
        ready = httpx.get(f"http://127.0.0.1:{PORT}/readyz", timeout=5).json()
        assert ready == {"status": "ready", "schema_revision": revision}
        uid = subprocess.run(["podman", "exec", name, "id", "-u"], capture_output=True, text=True, check=True)
        assert uid.stdout.strip() == "10001"
        top = subprocess.run(["podman", "top", name, "user", "args"], capture_output=True, text=True, check=True)
        assert "gpufleet serve" in top.stdout and "root" not in top.stdout
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def kubeconfig() -> Iterator[Path]:
    yield from start_apiserver()


def test_the_controller_runs_from_the_image_with_the_installs_service_account(
    image: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """The image runs `gpufleet controller` as the kustomize Deployment does, with a token of the
    `gpufleet-controller` ServiceAccount the manifests create (their roles, nothing more), read-only root: it takes
    the Lease and its /healthz and /metrics answer on --health-port."""
    assert KUBECTL is not None
    rendered = subprocess.run([KUBECTL, "kustomize", str(OVERLAY)], capture_output=True, text=True, check=True)
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=rendered.stdout)
    assert applied.returncode == 0, applied.stderr
    token = kubectl(kubeconfig, "-n", "gpufleet", "create", "token", "gpufleet-controller")
    assert token.returncode == 0, token.stderr
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    mount = tmp_path / "kube"
    mount.mkdir()
    (mount / "config").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "t", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "sa", "user": {"token": token.stdout.strip()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "t", "user": "sa"}}],
    }))  # fmt: skip
    mount.chmod(0o755)  # the image's user (10001) reads it
    (mount / "config").chmod(0o644)
    name = f"gpufleet-ctl-{secrets.token_hex(3)}"
    started = _image_sh(
        "run", "-d", "--read-only", "--name", name, "--network", "host", "-v", f"{mount}:/kube:ro", image,
        "controller", "--kubeconfig", "/kube/config", "--lease-namespace", "gpufleet", "--lease-name",
        "gpufleet-controller", "--identity", "from-image", "--health-port", str(CONTROLLER_PORT),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        deadline = time.monotonic() + 90
        metrics = ""
        while time.monotonic() < deadline and "gpufleet_controller_leader 1.0" not in metrics:
            with contextlib.suppress(httpx.TransportError):
                metrics = httpx.get(f"http://127.0.0.1:{CONTROLLER_PORT}/metrics", timeout=2).text
            time.sleep(0.5)
        logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True, check=False)
        assert "gpufleet_controller_leader 1.0" in metrics, logs.stdout[-1500:] + logs.stderr[-1500:]
        assert httpx.get(f"http://127.0.0.1:{CONTROLLER_PORT}/healthz", timeout=5).status_code == 200
        lease = kubectl(kubeconfig, "-n", "gpufleet", "get", "lease", "gpufleet-controller", "-o", "json")
        assert json.loads(lease.stdout)["spec"]["holderIdentity"] == "from-image"
        assert '"outcome": "failed"' not in logs.stderr  # nothing it did was refused (RBAC included)
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)


def test_the_runtime_image_has_no_package_installer_or_build_backend(image: str) -> None:
    """Review (fixed), the defect: the Containerfile's runtime stage copies the build stage's whole venv, and with
    it pip (from ``python3 -m venv``) and setuptools and wheel (installed from the lock to build the package): a
    package installer and a build backend in the production image, which a process that gets code execution in the
    container can use to fetch and install anything, and ~15 MB nobody runs. Now the build stage uninstalls them
    after installing gpufleet: the venv holds gpufleet and its runtime dependencies only, and gpufleet still runs."""
    probe = (
        "import importlib.util as u, sys; "
        "left = [m for m in ('pip', 'setuptools', 'wheel') if u.find_spec(m)]; "
        "print(' '.join(left)); sys.exit(1 if left else 0)"
    )
    r = _image_sh("run", "--rm", "--read-only", "--entrypoint", "/opt/gpufleet/bin/python", image, "-c", probe)
    assert r.returncode == 0, f"left in the image: {r.stdout.strip()} {r.stderr[-500:]}"
    ls = _image_sh("run", "--rm", "--read-only", "--entrypoint", "/bin/ls", image, "/opt/gpufleet/bin")
    assert ls.returncode == 0, ls.stderr
    assert not {"pip", "pip3", "wheel"} & set(ls.stdout.split()), ls.stdout
    ok = _image_sh("run", "--rm", "--read-only", image, "--help")
    assert ok.returncode == 0 and "serve" in ok.stdout, ok.stdout + ok.stderr
