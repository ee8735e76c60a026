"""The leader lock itself (service/leader.py) on the real PostgreSQL: one holder per schema, released with the
session, re-checked at most every poll interval, independent across schemas; SQLite's sole process leads."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text

from gpufleet.service.leader import AdvisoryLockLeader, SoleLeader, election_for
from tests.deploy.conftest import PgSchema


class _Clock:
    def __init__(self) -> None:
        self.t_s = 0.0

    def __call__(self) -> float:
        return self.t_s


@pytest.mark.postgres
def test_one_holder_per_schema_and_release_on_close(pg_schema: PgSchema) -> None:
    engine = create_engine(pg_schema.url)
    a, b = AdvisoryLockLeader(engine, poll_s=1.0), AdvisoryLockLeader(engine, poll_s=1.0)
    try:
        assert a.refresh() is True
        assert b.refresh() is False
        assert a.refresh() is True  # still held: the session is alive
        a.close()  # the session ends, the lock with it
        assert b.refresh() is True
        assert a.refresh() is False  # a closed candidate reconnects and finds the lock taken
    finally:
        a.close()
        b.close()
        engine.dispose()


@pytest.mark.postgres
def test_is_leader_is_cached_for_the_poll_interval_then_rechecked(pg_schema: PgSchema) -> None:
    engine = create_engine(pg_schema.url)
    clock = _Clock()
    a = AdvisoryLockLeader(engine, poll_s=1.0, clock_s=clock)
    b = AdvisoryLockLeader(engine, poll_s=1.0, clock_s=clock)
    try:
        assert a.is_leader() is True  # first call checks
        assert b.is_leader() is False
        with engine.connect() as conn:  # kill the lock holder's session (only it), as a lost connection would
            key = conn.execute(text("SELECT hashtextextended('gpufleet-leader:' || current_schema(), 0)")).scalar_one()
            killed = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND classid::bigint = :hi AND objid::bigint = :lo"
                ),
                {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
            ).all()
            conn.commit()
        assert killed == [(True,)]
        assert a.is_leader() is True  # cached: stale for at most poll_s (submission is idempotent anyway)
        clock.t_s = 1.0
        assert a.is_leader() is False  # re-checked: the session (and the lock) is gone
        deadline = time.monotonic() + 5  # pg_terminate_backend signals; the backend exits (and unlocks) soon after
        while not b.is_leader() and time.monotonic() < deadline:
            clock.t_s += 1.0
            time.sleep(0.05)
        assert b.is_leader() is True
    finally:
        a.close()
        b.close()
        engine.dispose()


@pytest.mark.postgres
def test_schemas_elect_independently(pg_schema: PgSchema) -> None:
    engine = create_engine(pg_schema.url)
    other = create_engine(pg_schema.url.replace(pg_schema.name, "public"))
    a, b = AdvisoryLockLeader(engine), AdvisoryLockLeader(other)
    try:
        assert a.refresh() is True and b.refresh() is True
    finally:
        a.close()
        b.close()
        engine.dispose()
        other.dispose()


def test_sqlite_has_one_process_and_it_leads(tmp_path: object) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/x.db")
    leader = election_for(engine, poll_s=1.0)
    assert isinstance(leader, SoleLeader) and leader.is_leader() and leader.refresh()
    engine.dispose()
