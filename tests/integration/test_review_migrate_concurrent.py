"""Review (migrate): two ``gpufleet db upgrade`` processes on the same store at the same moment (two replicas' init
containers, a deploy job and an operator), on SQLite and PostgreSQL: both must succeed (one waits for the other),
and the store ends at head, never half applied.

To make both processes overlap every time, a third session holds a lock the migration needs (SQLite: the write
lock; PostgreSQL: ``audit_events``, which the first step after 0008 alters) while both start, then lets go."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpufleet.adapters.sql import migrate
from tests.integration.conftest import Database, _make_database

REPO = Path(__file__).resolve().parents[2]
# imports everything first, then waits on stdin: the processes start migrating at the same instant
RUNNER = "import sys; from gpufleet.cli.main import main; sys.stdin.readline(); sys.argv[0] = 'gpufleet'; main()"


@pytest.fixture
def store(backend: str, tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    """An empty store (no schema yet): SQLite in a file of its own, PostgreSQL in a fresh schema."""
    yield from _make_database(backend, tmp_path, pg_reason, revision="base")


@contextmanager
def _blocking(db: Database) -> Iterator[None]:
    if db.backend == "sqlite":
        conn = sqlite3.connect(db.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = create_engine(db.url)
    try:
        with engine.connect() as conn:
            conn.execute(text("LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE"))
            yield
            conn.rollback()
    finally:
        engine.dispose()


def _upgrade_together(db: Database, n: int = 2) -> list[tuple[int, str]]:
    env = os.environ | {"GPUFLEET_NATIVE": "0", "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    env.pop("GPUFLEET_DB_URL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUNNER, "db", "upgrade", "--db", db.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
        )
        for _ in range(n)
    ]
    time.sleep(4)  # both have imported the command line and wait on stdin
    with _blocking(db):
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        time.sleep(3)  # both have read the store's revision and wait for the lock
    out = []
    for p in procs:
        output, _ = p.communicate(timeout=120)
        out.append((p.returncode, output))
    return out


PG = pytest.mark.postgres
CASES = [
    ("sqlite", "empty"),
    ("sqlite", "0008_approval_hardening"),
    pytest.param("postgres", "0008_approval_hardening", marks=PG),
]


@pytest.mark.parametrize(("backend", "start"), CASES)
def test_two_db_upgrades_at_once_both_succeed_and_the_store_is_at_head(store: Database, start: str) -> None:
    """Review (fixed), the defect: ``migrate.upgrade`` read the revision and runs the migrations with no lock around them, so two
    upgrades at once both run every step: on PostgreSQL the second fails (``trigger "audit_no_truncate" for relation
    "audit_events" already exists``, or from an empty schema ``duplicate key value violates unique constraint
    "pg_type_typname_nsp_index"``); on SQLite its deferred transaction cannot take the write lock its stale snapshot
    needs and fails at once with "database is locked" (no busy wait). Either way ``db upgrade`` exits 2 as if the
    store had refused the migration, and a deployment's second replica crash-loops."""
    if start != "empty":
        migrate.upgrade(store.engine, start)
    for code, output in _upgrade_together(store):
        assert code == 0, output
        assert "Traceback" not in output
    assert migrate.current_revision(store.engine) == migrate.head_revision(store.engine)
