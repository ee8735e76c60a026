"""Review (reconcile): ``gpufleet reconcile`` as a user runs it (``python -m gpufleet`` in a subprocess) against a
PostgreSQL store that hangs: another session holds a lock on the reservations table, so the pass's statements run
into the statement timeout (``GPUFLEET_DB_STATEMENT_TIMEOUT_S``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.integration.conftest import Database, _make_database, _pg_unreachable_reason

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_database(tmp_path: Path) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, _pg_unreachable_reason())


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "GPUFLEET_DB_STATEMENT_TIMEOUT_S": "1", "GPUFLEET_LEADER_POLL_S": "0.2", **extra}


def _gpufleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpufleet", *args]


def test_reconcile_once_on_a_locked_store_is_one_clear_error(pg_database: Database) -> None:
    """Review (fixed), the defect: ``gpufleet reconcile --once`` let the pass's OperationalError (statement timeout)
    escape: a 40-line SQLAlchemy traceback ending in the SQL text, exit 1, and no line saying what failed. Now one line
    ``error: reconciler pass failed: database unavailable: ...`` and exit 2."""
    holder = create_engine(pg_database.url)
    try:
        with holder.connect() as other:
            other.execute(text("LOCK TABLE reservations IN ACCESS EXCLUSIVE MODE"))
            out = subprocess.run(_gpufleet("reconcile", "--once", "--db", pg_database.url), env=_env(),
                                 capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
            other.rollback()
    finally:
        holder.dispose()
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "[SQL:" not in out.stderr, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "statement timeout" in last, out.stderr[-3000:]


def test_the_reconcile_loop_reports_a_failed_pass_and_goes_on(pg_database: Database, tmp_path: Path) -> None:
    """Review (fixed), the defect: without ``--once`` the loop is the leader's daemon (`gpufleet serve` runs the same
    loop and logs a failed pass, then retries), but ``gpufleet reconcile`` died on the first pass that met a locked
    table: a traceback, exit 1, and no reconciler until someone restarted it. Here the lock is held until the loop has
    met it, then released: the loop says the pass failed (a JSON line with ``error``) and runs it at a later check."""
    log = tmp_path / "reconcile.log"
    holder = create_engine(pg_database.url)
    try:
        with holder.connect() as other, log.open("wb") as sink:
            other.execute(text("LOCK TABLE reservations IN ACCESS EXCLUSIVE MODE"))
            proc = subprocess.Popen(
                _gpufleet("reconcile", "--db", pg_database.url, "--interval-s", "0.2", "--passes", "40"),
                env=_env(GPUFLEET_PLAN_INTERVAL_S="0.5"), stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
            deadline = time.monotonic() + 120
            while "statement timeout" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            other.rollback()  # the store answers again
            code = proc.wait(timeout=120)
    finally:
        holder.dispose()
    got = log.read_text()
    assert code == 0 and "Traceback" not in got, got[-3000:]
    lines = [json.loads(x) for x in got.splitlines() if x.startswith("{")]
    failed = [x for x in lines if x.get("error")]
    assert failed and "statement timeout" in failed[0]["error"] and failed[0]["leader"] is True, got[-3000:]
    assert any("proposals" in x for x in lines[lines.index(failed[0]) :]), got[-3000:]  # a later pass ran
