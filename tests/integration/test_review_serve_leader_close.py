"""Review (serve): ``AdvisoryLockLeader.close()`` waits for its mutex at most the connect + statement timeouts (a
refresh stuck on a silent database ends within that); when it could not take it, it went on without it: it closed the
lock session a refresh was still using, and a refresh still connecting took the lead after ``close()`` returned.
Requests call ``is_leader()`` (a refresh every ``leader_poll_s``) while the leader loop calls ``close()`` (the store at
another schema revision, the pass fenced out), so the two do meet. The database is made slow here by wrapping the
lock session's statements (each answers after 0.8 s, under the 1 s statement timeout) and its connect (2 s, under
libpq's connect timeout): a refresh then outlasts close's wait of 1.5 s."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.service.leader import AdvisoryLockLeader
from tests.integration.conftest import Database, _make_database

CONNECT_S, STATEMENT_S = 0.5, 1.0  # close() waits for its mutex at most their sum
WAIT_S = CONNECT_S + STATEMENT_S


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


def _slow_statements(leader: Any) -> None:
    bounded = leader._bounded

    def slow(conn: Connection, sql: str, **params: Any) -> Any:
        conn.execute(text("SELECT pg_sleep(0.8)"))  # the database answers each statement after 0.8 s
        return bounded(conn, sql, **params)

    leader._bounded = slow


def _slow_connect(leader: Any) -> None:
    engine = leader._engine
    connect = engine.connect

    class Slow:
        url = engine.url

        def connect(self) -> Any:
            time.sleep(2.0)  # a network that answers the connect after 2 s
            return connect()

        def dispose(self) -> None:
            engine.dispose()

    leader._engine = Slow()


def _close_during_refresh(leader: AdvisoryLockLeader) -> tuple[float, list[bool]]:
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(leader.refresh()))
    t.start()
    deadline = time.monotonic() + 10
    while not leader._mutex.locked():  # the refresh is under way, holding the mutex
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.01)
    started = time.monotonic()
    leader.close()
    took_s = time.monotonic() - started
    t.join(15)
    assert not t.is_alive()
    return took_s, got


@pytest.mark.postgres
def test_close_does_not_close_the_session_under_a_refresh(
    pg_database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Review (fixed), the defect: a refresh taking the lead (three statements on a slow database) when ``close()``
    gave up waiting for its mutex: ``close()`` closed the session the refresh was using (its next statement failed on
    a closed connection: "leader session lost: ResourceClosedError"), after waiting on the connection's own lock
    past its bound (2.3 s for a bound of 1.5 s here). Now ``close()`` leaves the session to the refresh and returns;
    the refresh ends its statements, closes the session and answers False."""
    engine = make_engine(pg_database.url, connect_timeout_s=CONNECT_S, statement_timeout_s=STATEMENT_S)
    a = AdvisoryLockLeader(engine, poll_s=0.05)
    b = AdvisoryLockLeader(pg_database.engine, poll_s=0.05)
    try:
        _slow_statements(a)
        with caplog.at_level(logging.WARNING, logger="gpufleet.leader"):
            took_s, got = _close_during_refresh(a)
        lost = [r.getMessage() for r in caplog.records if "session lost" in r.getMessage()]
        assert lost == [], lost  # the refresh's statement found its session closed under it
        assert took_s < WAIT_S + 0.7, took_s  # and close() waited on the session in use past its bound
        assert got == [False], got
        assert b.refresh(), "the lead is still held after close() and the refresh ended"
        assert not a.refresh()  # a later refresh may take the lead again, once it is free
    finally:
        b.close()
        a.close()
        engine.dispose()


@pytest.mark.postgres
def test_a_refresh_under_way_when_close_gives_up_does_not_keep_the_lead(pg_database: Database) -> None:
    """Review (fixed), the defect: a refresh still connecting (a slow network) when ``close()`` gave up waiting for
    it: ``close()`` found no session to close and returned; the refresh then connected and took the lead, which this
    process kept after giving it up (a follower could not take it until this process's next ``close()``). Now a
    refresh during which ``close()`` was called gives the lead up at its end and answers False."""
    engine = make_engine(pg_database.url, connect_timeout_s=CONNECT_S, statement_timeout_s=STATEMENT_S)
    a = AdvisoryLockLeader(engine, poll_s=0.05)
    b = AdvisoryLockLeader(pg_database.engine, poll_s=0.05)
    try:
        _slow_connect(a)
        took_s, got = _close_during_refresh(a)
        assert took_s < WAIT_S + 0.7, took_s
        assert got == [False], got  # the refresh under way when close() was called does not lead
        assert b.refresh(), "the lead is held by the process that gave it up"
    finally:
        b.close()
        a.close()
        engine.dispose()
