"""Review (migrate): the schema migrations ran under the service's per-statement timeout (``make_engine``'s
``statement_timeout_s``, 30 s, which ``gpufleet db upgrade`` does not even let the operator change), so a store
whose migration has one long statement (0008 indexes ``utilization``, 0012 copies it: a year of hourly records of a
few thousand workloads is tens of millions of rows) could never be upgraded: the statement was cancelled, the
migration rolled back, every re-run the same. Shown here at a small scale with a small timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from tests.integration.conftest import BACKENDS, Database, _make_database

START = "0007"  # the next step indexes utilization; 0012 later rebuilds it on SQLite
ROWS = 400_000


@pytest.fixture(params=BACKENDS)
def big_store(request: pytest.FixtureRequest, tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    gen = _make_database(request.param, tmp_path, pg_reason, revision=START)
    db = next(gen)
    with db.engine.begin() as conn:
        if db.backend == "postgres":
            conn.execute(
                text(
                    "INSERT INTO utilization (source, bucket_start_s, workload_id, bucket_s, team_id, sku_id, "
                    "gpus_allocated, gpu_util) SELECT 'dcgm', 1700000000 + 3600 * (i / 500), 'wl-' || (i % 500), "
                    "3600, 'team-' || (i % 37), 'h100_80gb', 1.0, 0.5 FROM generate_series(1, :n) AS i"
                ),
                {"n": ROWS},
            )
        else:
            conn.execute(
                text(
                    "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) "
                    "INSERT INTO utilization (source, bucket_start_s, workload_id, bucket_s, team_id, sku_id, "
                    "gpus_allocated, gpu_util) SELECT 'dcgm', 1700000000 + 3600 * (i / 500), 'wl-' || (i % 500), "
                    "3600, 'team-' || (i % 37), 'h100_80gb', 1.0, 0.5 FROM s"
                ),
                {"n": ROWS},
            )
    yield db
    for _ in gen:
        pass


def test_a_migration_step_longer_than_the_statement_timeout_still_completes(big_store: Database) -> None:
    """Review (fixed), the defect: ``migrate.upgrade`` ran the migrations on the engine as the service uses it, statement timeout
    included (PostgreSQL ``statement_timeout``, SQLite's progress-handler deadline): "refused the migration:
    canceling statement due to statement timeout" (PostgreSQL) / "interrupted" (SQLite), for ever."""
    engine = make_engine(big_store.url, statement_timeout_s=0.05)
    try:
        assert migrate.upgrade(engine) == (START, migrate.head_revision(engine))
    finally:
        engine.dispose()
    with big_store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM utilization")).scalar_one() == ROWS


@pytest.mark.postgres
def test_a_migration_waiting_for_a_busy_table_gives_up_and_leaves_the_old_revision(
    tmp_path: Path, pg_reason: str | None
) -> None:
    """Without a statement timeout, a lock wait is still bounded (``lock_timeout``): an upgrade stuck behind a long
    transaction fails with one line instead of queueing every query of the service behind its lock request."""
    gen = _make_database("postgres", tmp_path, pg_reason, revision=START)
    db = next(gen)
    engine = make_engine(db.url, statement_timeout_s=1)
    try:
        with db.engine.connect() as holder:
            holder.execute(text("LOCK TABLE utilization IN ACCESS SHARE MODE"))  # a long report, say
            with pytest.raises(migrate.DatabaseNotMigrated, match="lock timeout"):
                migrate.upgrade(engine)
            holder.rollback()
        assert migrate.current_revision(engine) == START
    finally:
        engine.dispose()
        for _ in gen:
            pass
