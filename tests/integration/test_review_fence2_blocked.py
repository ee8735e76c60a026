"""Review (fence2): ``BLOCKED_AFTER`` (two steps in a row failing on the store's availability stop the pass) must tell
a blocked store (a whole table locked, the connection lost) from two unrelated rows each held locked by another
session (two SKUs each locked by a request that stalled inside its transaction)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, _make_database
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400
SKUS = ("a100_80gb", "h100_80gb", "h200_141gb", "l40s")  # forecast and planned in this order (sorted)


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


@pytest.mark.postgres
def test_two_skus_locked_by_other_sessions_do_not_stop_the_whole_pass(pg_database: Database) -> None:
    """Review (fixed), the defect: any two steps in a row failing on the store's availability stopped the pass as
    "store blocked", so two unrelated locked rows skipped every other SKU and the placements for a day. Now, at
    ``BLOCKED_AFTER``, PostgreSQL is asked whether a whole table is locked; only then does the pass stop. The attack:
    the first two SKUs' rows are each held locked by another session (a catalog edit stalled before its
    commit) past the statement timeout, so their orders cannot be inserted (the foreign key's share lock waits); the
    rest of the store answers. The pass must still plan the other SKUs (and re-evaluate placements) rather than name
    them all as skipped behind ``store blocked`` and record the pass, which puts off their planning for a whole
    ``plan_interval_s``."""
    engine = make_engine(pg_database.url, statement_timeout_s=1.0)
    s = build_services(Settings(db_url=pg_database.url, reconcile_interval_s=0), engine=engine,
                       clock=FixedClock(NOW_S))  # fmt: skip
    admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
    for sku in SKUS:
        s.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))
    holder = create_engine(pg_database.url)
    try:
        with holder.connect() as other:  # two requests, each stalled inside its own SKU's transaction
            for sku in SKUS[:2]:  # what a catalog edit (PATCH of the SKU, registry.py) holds to its commit
                other.execute(text("SELECT id FROM skus WHERE id = :s FOR UPDATE"), {"s": sku})
            done = s.reconciler.run_once()
            other.rollback()
    finally:
        holder.dispose()
        engine.dispose()
    assert [p["sku"] for p in done.proposals if "error" in p] == list(SKUS[:2]), done.proposals
    assert done.stopped is None, done.as_dict()
    assert len(done.placements) == 0 or all("skipped" not in p for p in done.placements), done.placements
    planned = [p["sku"] for p in done.proposals if "skipped" not in p and "error" not in p]
    assert planned == list(SKUS[2:]), done.proposals
