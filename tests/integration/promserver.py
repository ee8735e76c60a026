"""A real Prometheus on loopback over a TSDB backfilled from OpenMetrics text (``promtool tsdb
create-blocks-from openmetrics``), for tests that read series back through the HTTP API. Needs the Debian package
``prometheus`` (scripts/install-system-deps.sh); callers skip when :func:`available` is false."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

SKIP_REASON = "prometheus/promtool not installed (Debian package `prometheus`: apt-get install -y prometheus)"


def available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus_over(d: Path, openmetrics: str) -> Iterator[str]:
    """Backfill ``openmetrics`` into a TSDB under ``d``, serve it, yield the base URL; stop it on exit."""
    (d / "data.om").write_text(openmetrics)
    tsdb = d / "tsdb"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(d / "data.om"), str(tsdb)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (d / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    log = (d / "prometheus.log").open("w")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={tsdb}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(d / 'prometheus.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/-/ready", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready in 30 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
