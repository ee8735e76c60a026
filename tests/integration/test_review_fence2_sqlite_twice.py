"""Review (fence2): on SQLite every process leads (``SoleLeader``, no fencing epoch), so ``gpufleet reconcile`` run by
hand beside a running ``gpufleet serve`` makes two reconcilers on one store at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import ReservationRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, _make_database
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400


@pytest.fixture
def database(tmp_path: Path, sqlite_template: Path) -> Iterator[Database]:
    yield from _make_database("sqlite", tmp_path, None, sqlite_template)  # PostgreSQL elects one leader


def test_two_reconcilers_on_one_sqlite_store_place_each_order_once(database: Database) -> None:
    """Review (holds): two reconcilers at once on one SQLite store (serve's loop and a hand-run ``reconcile``), each
    with its own engine, both submitting the same approved reservation (the provider slow to answer) and both
    planning the same SKU: one provider order (the fixed idempotency key), one status change, and the proposal
    made once (their keys are fixed by the day; SQLite's BEGIN IMMEDIATE serializes the writers)."""
    procs: list[Services] = []
    for _ in range(2):
        engine = make_engine(database.url)
        procs.append(build_services(Settings(db_url=database.url, reconcile_interval_s=0), engine=engine,
                                    clock=FixedClock(NOW_S), provider=SimulatedProvider(engine, latency_s=0.3)))  # fmt: skip
    try:
        a = procs[0]
        a.ingest.ingest(Actor("bob", Role.ML_PLATFORM_ADMIN, None), _records("h100_80gb", NOW_S - 28 * DAY, 28, 24))
        for _ in range(3):
            a.provider.inject("timeout_before_order")  # type: ignore[attr-defined]
        res = a.reservations.create(Actor("carol", Role.ML_PLATFORM_ADMIN, None), sku_id="h100_80gb", units=8,
                                    start_s=NOW_S + DAY, term_months=1, regions=["us-east-1"])  # fmt: skip
        a.reservations.approve(Actor("alice", Role.FINOPS_ADMIN, None), res.id, approver_ids=None, budget_code="X")
        passes: list[dict[str, Any]] = []
        barrier = threading.Barrier(2)

        def run(s: Services) -> None:
            barrier.wait()
            s.reservations.reconcile()
            passes.append(s.reconciler.run_once().as_dict())

        threads = [threading.Thread(target=run, args=(s,)) for s in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(passes) == 2, passes
        orders = a.provider.orders()  # type: ignore[attr-defined]
        assert [o.idempotency_key for o in orders] == [f"gpufleet-{res.id}"], orders
        created = [c for p in passes for e in p["proposals"] for c in e["created"]]
        with database.engine.connect() as c:
            assert c.scalar(select(ReservationRow.status).where(ReservationRow.id == res.id)) == "submitted"
            made = c.scalar(select(func.count()).select_from(ReservationRow).where(ReservationRow.id != res.id))
        assert made == len(set(created)) == 1, (made, created)  # one order (each pass names it: the key's replay)
    finally:
        for s in procs:
            s.engine.dispose()
