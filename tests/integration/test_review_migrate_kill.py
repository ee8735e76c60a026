"""Review (migrate): ``gpufleet db upgrade`` killed (SIGKILL: an OOM kill, a node lost) in the middle of the
migrations, on SQLite and PostgreSQL. The store must be left at its old revision with every row, refused by the
service with the command that fixes it (not served half migrated), and a re-run must finish the upgrade."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import safe_url
from tests.integration.conftest import Database, _make_database

REPO = Path(__file__).resolve().parents[2]
ROWS = 200_000


def _cli_upgrade(url: str) -> subprocess.Popen[str]:
    env = os.environ | {"GPUFLEET_NATIVE": "0", "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    env.pop("GPUFLEET_DB_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "db", "upgrade", "--db", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )


def _fill_utilization(db: Database) -> None:
    rows = [
        {"s": "dcgm", "b": 1_700_000_000 + 3600 * (i // 50), "w": f"wl-{i % 50}", "u": (i % 100) / 100}
        for i in range(ROWS)
    ]
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO utilization (source, bucket_start_s, workload_id, bucket_s, team_id, sku_id, "
                "gpus_allocated, gpu_util) VALUES (:s, :b, :w, 3600, 'team-a', 'h100_80gb', 1.0, :u)"
            ),
            rows,
        )


def _assert_old_and_usable(db: Database, revision: str) -> None:
    assert migrate.current_revision(db.engine) == revision
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM utilization")).scalar_one() == ROWS
    with pytest.raises(migrate.DatabaseNotMigrated, match="run: gpufleet db upgrade"):
        migrate.ensure_migrated(db.engine, safe_url=safe_url(db.engine))


def _finish(db: Database, revision: str) -> None:
    proc = _cli_upgrade(db.url)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert f"schema {revision} -> {migrate.head_revision(db.engine)}" in out, out
    migrate.ensure_migrated(db.engine, safe_url=safe_url(db.engine))
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM utilization")).scalar_one() == ROWS


@pytest.fixture
def sqlite_0011(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("sqlite", tmp_path, pg_reason, revision="0011_capacity_block_purchases")


def test_sqlite_upgrade_killed_while_rebuilding_a_table_leaves_the_old_revision(sqlite_0011: Database) -> None:
    """0012 rebuilds ``utilization`` (copy, drop, rename); the process is killed once the copy is being written."""
    db = sqlite_0011
    _fill_utilization(db)
    db.engine.dispose()
    wal = Path(db.url.removeprefix("sqlite:///") + "-wal")
    start = wal.stat().st_size if wal.exists() else 0
    proc = _cli_upgrade(db.url)
    deadline = time.monotonic() + 60
    while (wal.stat().st_size if wal.exists() else 0) < start + 4_000_000:  # the copy spills into the WAL
        assert proc.poll() is None, "the upgrade finished before it could be killed: make the table bigger"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _assert_old_and_usable(db, "0011_capacity_block_purchases")
    assert {c["name"]: c["nullable"] for c in inspect(db.engine).get_columns("utilization")}["gpu_util"] is False
    _finish(db, "0011_capacity_block_purchases")


@pytest.fixture
def pg_0002(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason, revision="0002")


@pytest.mark.postgres
def test_postgres_upgrade_killed_after_five_steps_leaves_the_old_revision(pg_0002: Database) -> None:
    """From 0002 the upgrade runs 0003..0007, then 0008 indexes ``utilization``: another session holds that table
    locked, so the process is caught there (five migrations applied in its transaction) and killed."""
    db = pg_0002
    _fill_utilization(db)
    blocker = create_engine(db.url)
    try:
        with blocker.connect() as conn, blocker.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher:
            conn.execute(text("LOCK TABLE utilization IN ACCESS EXCLUSIVE MODE"))
            proc = _cli_upgrade(db.url)
            deadline = time.monotonic() + 60
            while not watcher.execute(
                text(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'CREATE INDEX ix_util_team_time%'"
                )
            ).first():
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            conn.rollback()
    finally:
        blocker.dispose()
    time.sleep(0.5)  # the server notices the lost client once its statement ends, and rolls back
    _assert_old_and_usable(db, "0002")
    assert "pool_signals" not in inspect(db.engine).get_table_names()
    _finish(db, "0002")
