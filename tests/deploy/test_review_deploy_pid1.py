"""Review (deploy): the image's entrypoint ``exec``s ``gpufleet``, so the gpufleet process is PID 1 of its container.
The kernel delivers a signal to a namespace's init only if the process has a handler for it: with Python's default
SIGTERM disposition, the kubelet's SIGTERM is dropped and the container ends only on the SIGKILL after
``terminationGracePeriodSeconds``. Run here as in a container (``unshare --pid --fork``: a new PID namespace whose first
process is the entrypoint's ``gpufleet``), against the host's PostgreSQL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.deploy.conftest import PgSchema

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "deploy" / "entrypoint.sh"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare and root (a new PID namespace)"
    ),
]


def _pid1_of(launcher: subprocess.Popen[bytes], deadline_s: float = 30.0) -> int:
    """The host pid of the namespace's PID 1 (``unshare --fork``'s child), once it has exec'd Python."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True, check=False)
        kids = found.stdout.split()
        if kids and "python" in Path(f"/proc/{kids[0]}/exe").resolve().name:
            return int(kids[0])
        time.sleep(0.1)
    raise AssertionError("the entrypoint's process did not start")


def test_sigterm_ends_db_upgrade_running_as_pid_1(pg_schema: PgSchema) -> None:
    """Review (fixed), the defect: ``gpufleet db upgrade`` (the migration Job) installed no SIGTERM handler. As PID 1,
    waiting for the migration lock another upgrade holds, a SIGTERM was ignored: it ran on until its lock timeout
    (30 s), as a Job being deleted or an upgrade being rolled back waits its grace period and is SIGKILLed. Now
    ``gpufleet``'s main turns SIGTERM into SystemExit(143) for every command that has no handler of its own: it
    ends at once, its transaction rolled back."""
    holder = create_engine(pg_schema.url).connect()
    tx = holder.begin()
    holder.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('gpufleet.migrate:' || current_schema(), 0))"))
    env = {
        **os.environ,
        "GPUFLEET_DB_URL": pg_schema.url,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    launcher = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "sh", str(ENTRYPOINT), "db", "upgrade"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        pid1 = _pid1_of(launcher)
        time.sleep(3)  # connected, waiting for the lock
        assert launcher.poll() is None, launcher.communicate()[0].decode()
        sent = time.monotonic()
        os.kill(pid1, signal.SIGTERM)  # from the parent namespace, as the container runtime sends it
        try:
            out, _ = launcher.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            launcher.kill()
            pytest.fail("SIGTERM ignored: db upgrade still ran 10 s later")
        took_s = time.monotonic() - sent
        assert took_s < 5, took_s
        assert launcher.returncode == 128 + signal.SIGTERM, out.decode()
        assert b"Traceback" not in out, out.decode()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        tx.rollback()
        holder.close()
