"""Review (serve): a planning pass that stopped early on the store (``store blocked``: a whole-table lock seen; ``store
slow``) is recorded with the steps it skipped. The leader loop's cadence (``Reconciler.due``) counted it as a
complete pass, so the SKUs it skipped waited a whole ``plan_interval_s`` (a day by default) before planning was tried
again: an approved order or a shortage unhandled for a day because of a transient lock."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.api.app import _LeaderLoop
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.reconciler import ReconcilePass
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, _make_database
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400
RETRY_S = 600
SKUS = ("a100_80gb", "h100_80gb", "l40s")


@contextmanager
def _locked_until_stopped(database: Database, s: Services) -> Iterator[None]:
    """Another session holds a lock over the whole store (SQLite: its write lock, ``BEGIN IMMEDIATE``) or over the
    reservations table (PostgreSQL: ``LOCK TABLE ... IN SHARE MODE``, what an index build holds: reads go on) until the pass stops on it
    (the lock is then released, as a transient one is: the pass records itself)."""
    release: Callable[[], None]
    if database.backend == "sqlite":
        conn = sqlite3.connect(database.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")

        def release() -> None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    else:
        holder = create_engine(database.url)
        pg = holder.connect()
        pg.execute(text("LOCK TABLE reservations IN SHARE MODE"))

        def release() -> None:
            if pg.in_transaction():
                pg.rollback()

    reconciler: Any = s.reconciler
    failed = reconciler._failed

    def failed_then_release(out: ReconcilePass, exc: Exception) -> str:
        why: str = failed(out, exc)
        if out.stopped is not None:
            release()
        return why

    reconciler._failed = failed_then_release
    try:
        yield
    finally:
        del reconciler._failed
        release()
        if database.backend == "sqlite":
            conn.close()
        else:
            pg.close()
            holder.dispose()


def _ingest(s: Services) -> None:
    """28 days of steady use of each SKU up to the pass (NOW_S): each pass proposes (writes) for each SKU."""
    admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
    for sku in SKUS:
        s.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))


def _passes(s: Services) -> list[dict[str, Any]]:
    with s.engine.connect() as conn:
        rows = conn.scalars(select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass")
                            .order_by(AuditEventRow.id))  # fmt: skip
        return [json.loads(d) for d in rows]


def test_a_stopped_pass_is_retried_after_the_retry_interval_with_backoff(database: Database) -> None:
    """Review (fixed), the defect: a pass stopped on a whole-store lock (SQLite's write lock, a PostgreSQL ``LOCK
    TABLE``) was recorded and counted by ``Reconciler.due`` as a complete pass: the SKUs it skipped waited a whole
    ``plan_interval_s`` (a day) for their next try, though the lock was gone minutes later. Now it is retried after
    ``plan_retry_s``; a second stopped pass in a row waits twice that (at most ``plan_interval_s``); a complete pass
    puts the cadence back to ``plan_interval_s``."""
    engine = make_engine(database.url, busy_timeout_s=0.5, statement_timeout_s=1.0)
    clock = FixedClock(NOW_S - DAY)  # the leader takes the lead a day before the first pass
    s = build_services(Settings(db_url=database.url, reconcile_interval_s=30, plan_interval_s=DAY,
                                plan_retry_s=RETRY_S), engine=engine, clock=clock)  # fmt: skip
    try:
        loop = _LeaderLoop(s)
        loop.step()  # takes the lead: a fresh store is first planned one period later
        assert _passes(s) == []
        clock.advance(DAY)
        _ingest(s)
        with _locked_until_stopped(database, s):
            loop.step()
        got = _passes(s)
        assert len(got) == 1 and "stopped" in got[0], got  # the first pass stopped on the lock, recorded
        clock.advance(RETRY_S - 1)
        loop.step()
        assert len(_passes(s)) == 1  # not retried before the retry interval
        clock.advance(1)
        with _locked_until_stopped(database, s):
            loop.step()  # retried: the lock is there again, stopped again
        got = _passes(s)
        assert len(got) == 2 and "stopped" in got[1], got
        clock.advance(2 * RETRY_S - 1)
        loop.step()
        assert len(_passes(s)) == 2  # backoff: the second stopped pass in a row waits twice the retry interval
        clock.advance(1)
        loop.step()
        got = _passes(s)
        assert len(got) == 3 and "stopped" not in got[2], got  # the lock is gone: a complete pass
        assert not any("skipped" in p for p in got[2]["proposals"]), got[2]
        clock.advance(DAY - 1)
        loop.step()
        assert len(_passes(s)) == 3  # a complete pass: the cadence is plan_interval_s again
        clock.advance(1)
        loop.step()
        assert len(_passes(s)) == 4
    finally:
        s.leader.close()
        engine.dispose()


@pytest.mark.parametrize("retry_s", [0])
def test_a_zero_retry_interval_keeps_the_full_period(database: Database, retry_s: int) -> None:
    """``plan_retry_s`` 0: a stopped pass waits ``plan_interval_s`` as before (the retry is off)."""
    engine = make_engine(database.url, busy_timeout_s=0.5, statement_timeout_s=1.0)
    clock = FixedClock(NOW_S - DAY)  # the leader takes the lead a day before the first pass
    s = build_services(Settings(db_url=database.url, reconcile_interval_s=30, plan_interval_s=DAY,
                                plan_retry_s=retry_s), engine=engine, clock=clock)  # fmt: skip
    try:
        loop = _LeaderLoop(s)
        loop.step()
        clock.advance(DAY)
        _ingest(s)
        with _locked_until_stopped(database, s):
            loop.step()
        assert len(_passes(s)) == 1 and "stopped" in _passes(s)[0]
        clock.advance(DAY - 1)
        loop.step()
        assert len(_passes(s)) == 1
        clock.advance(1)
        loop.step()
        assert len(_passes(s)) == 2
    finally:
        s.leader.close()
        engine.dispose()


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


@pytest.mark.postgres
def test_a_pass_whose_skus_failed_on_locked_rows_is_retried_soon(pg_database: Database) -> None:
    """Review (fixed), the defect: a pass that goes on past two SKUs each held locked by another session (no table
    locked: not ``store blocked``, test_review_fence2_blocked.py) reports them with their ``error`` and is recorded
    like a complete one: those two SKUs (an order, a shortage) waited a day for their next try. Now the pass records
    its ``store_failures`` and is retried after ``plan_retry_s`` as a stopped one."""
    engine = make_engine(pg_database.url, statement_timeout_s=1.0)
    clock = FixedClock(NOW_S)
    s = build_services(Settings(db_url=pg_database.url, reconcile_interval_s=30, plan_interval_s=DAY,
                                plan_retry_s=RETRY_S), engine=engine, clock=clock)  # fmt: skip
    holder = create_engine(pg_database.url)
    try:
        _ingest(s)
        with holder.connect() as other:  # two requests, each stalled inside its own SKU's transaction
            for sku in SKUS[:2]:
                other.execute(text("SELECT id FROM skus WHERE id = :s FOR UPDATE"), {"s": sku})
            done = s.reconciler.run_once()
            other.rollback()
        assert done.stopped is None and [p["sku"] for p in done.proposals if "error" in p] == list(SKUS[:2])
        clock.advance(RETRY_S)
        assert s.reconciler.due(DAY, NOW_S - DAY)
        second = s.reconciler.run_once()  # the rows are free now: a complete pass, the period again
        assert second.stopped is None and not any("error" in p for p in second.proposals), second.as_dict()
        clock.advance(RETRY_S)
        assert not s.reconciler.due(DAY, NOW_S - DAY)
    finally:
        holder.dispose()
        s.leader.close()
        engine.dispose()
