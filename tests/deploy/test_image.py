"""The container image, built here from Debian packages only (``make image`` = scripts/image.sh build), runs:
it serves /healthz on the port PORT names, as a non-root user, and `gpufleet db upgrade` from the image
migrates the host's PostgreSQL (a fresh schema). Both run with a read-only root filesystem (``--read-only``,
podman's tmpfs on /tmp), as the Kubernetes manifests' ``readOnlyRootFilesystem: true`` does.

The base tarball is cached outside the repository (~/.cache/gpufleet-image) and podman caches the dependency
layer, so after the first run a rebuild only reinstalls the package (tens of seconds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.deploy.conftest import PgSchema

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/gpufleet:test"
PORT = 9123

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
