"""Review (serve): the leader's planning pass (``Reconciler.run_once``) on a PostgreSQL store that is slow rather than
locked: every write waits past the statement timeout, but no session holds a lock over a whole table. ``BLOCKED_AFTER``
stops a pass only when ``pg_locks`` shows such a lock (so that two rows held by stalled requests do not skip every
other SKU: test_review_fence2_blocked.py); a merely slow store made the pass wait one statement timeout for each SKU
(30 s by default: a catalog of 50 SKUs is 25 minutes), during which the leader loop neither submits approvals nor
reconciles with the provider (the pass runs in its step)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.pass_records import deferred_steps
from gpufleet.service.settings import Settings
from gpufleet.service.uow import UnitOfWork
from tests.integration.conftest import NOW_S, Database, ServerFactory, _make_database
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400
SKUS = ("a100_80gb", "b200", "h100_80gb", "h200_141gb", "l40s")  # planned in this order (sorted)
TIMEOUT_S = 1.0
SLOW = (  # in the test's own schema: every reservation INSERT sleeps past the statement timeout (an overloaded disk)
    "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(10); RETURN NEW; END $$",
    "CREATE TRIGGER slow_insert BEFORE INSERT ON reservations FOR EACH ROW EXECUTE FUNCTION slow_insert()",
)


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


@pytest.mark.postgres
def test_a_pass_on_a_slow_store_waits_a_bounded_number_of_statement_timeouts(
    pg_database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Review (fixed), the defect: with every SKU's order insert timing out and no table locked, the pass went on to
    the next SKU after each timeout: six SKUs, six statement timeouts (10 s for the pass here, with a 1 s timeout; five SKUs in this test). Now the pass
    stops at ``STORE_FAILURES_PER_PASS`` (3) availability failures, in a row or not (``stopped``: ``store slow``),
    names the rest as skipped (deferred to the next pass), logs it and records it in its audit event."""
    engine = make_engine(pg_database.url, statement_timeout_s=TIMEOUT_S)
    s = build_services(Settings(db_url=pg_database.url, reconcile_interval_s=0), engine=engine,
                       clock=FixedClock(NOW_S))  # fmt: skip
    try:
        admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
        for sku in SKUS:
            s.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))
        with pg_database.engine.begin() as c:
            for sql in SLOW:
                c.execute(text(sql))
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="gpufleet.reconciler"):
            done = s.reconciler.run_once()
        took_s = time.monotonic() - started
        with engine.connect() as conn:
            recorded = [json.loads(d) for d in conn.scalars(
                select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass"))]  # fmt: skip
    finally:
        engine.dispose()
    failed = [p["sku"] for p in done.proposals if "error" in p]
    assert failed and all("statement timeout" in p["error"] for p in done.proposals if "error" in p), done.proposals
    assert len(failed) <= 3, (failed, took_s)  # bounded: not one statement timeout per SKU (took 10 s here)
    skipped = [p["sku"] for p in done.proposals if "skipped" in p]
    assert failed + skipped == list(SKUS), done.proposals  # the rest is named, deferred to the next pass
    assert done.stopped and "slow" in done.stopped and not done.lead_lost, done.as_dict()
    assert len(recorded) == 1 and recorded[0].get("stopped") == done.stopped, recorded  # audited
    assert deferred_steps(recorded[0]) == len(skipped) + len(done.placements), recorded  # the metric's count
    assert any("slow" in r.getMessage() for r in caplog.records), caplog.text  # and logged


def test_metrics_count_the_steps_the_last_pass_deferred(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: a pass stopped on the store (``store slow``, ``store blocked``) named the SKUs and
    clusters it skipped in its audit event only; nothing a dashboard or an alert reads said that planning was put
    off. Now ``/metrics`` has ``gpufleet_queue_length{queue="reconciler_deferred"}``: the steps the last recorded
    pass skipped (any process's: read from its audit event)."""
    detail = {"stopped": "store slow: 3 steps of this pass failed on the database (...)", "at_s": NOW_S,
              "process": "h:1", "provider": {}, "forecasts": [{"sku": "l40s", "skipped": "store slow"}],
              "proposals": [{"sku": "a100_80gb", "region": "us-east-1", "error": "timeout", "created": []},
                            {"sku": "l40s", "region": None, "skipped": "store slow", "created": []}],
              "placements": [{"cluster": "prod", "skipped": "store slow"}]}  # fmt: skip
    with UnitOfWork(database.engine, write=True) as uow:
        uow.audit(at_s=NOW_S - 60, actor="reconciler", action="reconciler.pass", entity="reconciler",
                  entity_id="h:1", detail=detail)  # fmt: skip
        uow.commit()
    server = make_server(database)
    with server.client("viewer", "vic") as api:
        got = api.get("/metrics")
    assert got.status_code == 200, got.text
    assert 'gpufleet_queue_length{queue="reconciler_deferred"} 3.0' in got.text, got.text[:2000]
