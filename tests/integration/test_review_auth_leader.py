"""Review (start-up/shutdown): the leader's lock session has no client-side timeout, so a PostgreSQL that goes
silent hangs the leader election -- and with it the requests that ask whether this process leads, and a clean
shutdown -- forever, while every other database path gives up after ``db_connect_timeout_s`` /
``db_statement_timeout_s`` (503).

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.service.leader import AdvisoryLockLeader
from tests.integration.conftest import Database, _make_database
from tests.integration.tcp_proxy import TcpProxy

BOUND_S = 10.0  # generous: the service's own timeouts here are 2 s connect + 2 s statement


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


def _finishes_within(fn: Callable[[], Any], bound_s: float) -> tuple[bool, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            out["result"] = fn()
        except Exception as exc:  # any answer (False, an error) is fine: hanging is not
            out["error"] = repr(exc)
        out["took_s"] = time.monotonic() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(bound_s)
    return not th.is_alive(), out


@pytest.mark.postgres
def test_a_silent_database_does_not_hang_the_leader_check(pg_database: Database) -> None:
    """Review (fixed), the defect: ``AdvisoryLockLeader`` (service/leader.py) opens its lock session with its own engine
    (``create_engine(engine.url, poolclass=NullPool, connect_args={keepalives...})``) that has no ``connect_timeout``,
    no ``tcp_user_timeout`` and no statement timeout. When the database stops answering (the network path drops
    silently), ``refresh()`` -- ``SELECT 1`` on the held session, or ``pg_try_advisory_lock`` -- waits forever while
    holding ``self._mutex``; every request thread that then calls ``is_leader()`` (the reservation service's
    ``may_submit`` hook, after ``leader_poll_s``) blocks on that mutex forever too. The API then hangs instead of
    answering 503 within the configured timeouts. Expected: ``refresh()`` and ``is_leader()`` answer (False, or raise)
    within a bounded time, like every other database access."""
    proxy = TcpProxy("127.0.0.1", 5432)
    url = pg_database.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    engine = make_engine(url, pool_size=2, connect_timeout_s=2.0, statement_timeout_s=2.0)
    leader = AdvisoryLockLeader(engine, poll_s=0.2)
    try:
        assert leader.refresh() is True  # this process leads
        proxy.freeze()  # the database goes silent
        time.sleep(0.3)
        done, _out = _finishes_within(leader.refresh, BOUND_S)
        assert done, f"leader.refresh() still waiting after {BOUND_S} s on a silent database"
        done, _out = _finishes_within(leader.is_leader, BOUND_S)
        assert done, f"leader.is_leader() (a request's check) still waiting after {BOUND_S} s"
    finally:
        proxy.refuse()  # release whatever still waits
        engine.dispose()


@pytest.mark.postgres
def test_shutdown_releases_the_lead_in_bounded_time_when_the_database_is_silent(pg_database: Database) -> None:
    """Defect (same cause): the lifespan's shutdown calls ``services.leader.close()`` (api/app.py), which runs
    ``SELECT pg_advisory_unlock_all()`` on the lock session with no timeout. With a silent database a SIGTERM'd
    server never finishes shutting down (the process has to be killed), although the session's lock would be freed by
    simply dropping the connection. Expected: ``close()`` returns within a bounded time."""
    proxy = TcpProxy("127.0.0.1", 5432)
    url = pg_database.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    engine = make_engine(url, pool_size=2, connect_timeout_s=2.0, statement_timeout_s=2.0)
    leader = AdvisoryLockLeader(engine, poll_s=0.2)
    try:
        assert leader.refresh() is True
        proxy.freeze()
        done, _out = _finishes_within(leader.close, BOUND_S)
        assert done, f"leader.close() still waiting after {BOUND_S} s on a silent database"
    finally:
        proxy.refuse()
        engine.dispose()


@pytest.mark.postgres
def test_a_new_process_does_not_hang_electing_against_a_silent_database(pg_database: Database) -> None:
    """Defect (same cause): a process whose first ``refresh()`` meets a database that accepts TCP and never answers
    waits in libpq's connect forever (no ``connect_timeout`` on the lock engine), although the service's own engine
    gives up after ``db_connect_timeout_s``. Expected: ``refresh()`` answers False (or raises) within a bounded time."""
    proxy = TcpProxy("127.0.0.1", 5432)
    url = pg_database.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    engine = make_engine(url, pool_size=2, connect_timeout_s=2.0, statement_timeout_s=2.0)
    leader = AdvisoryLockLeader(engine, poll_s=0.2)
    try:
        proxy.freeze()
        done, _out = _finishes_within(leader.refresh, BOUND_S)
        assert done, f"leader.refresh() still connecting after {BOUND_S} s"
    finally:
        proxy.refuse()
        engine.dispose()
