"""Review (fencing): one failing step of a reconciler pass (the provider stage, the Capacity Block purchases) must be
reported on its own while the other stages run; a store that blocks every SKU must stop the pass early, not cost
one statement timeout per SKU."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.reconciler import Reconciler
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, _make_database
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400
SKUS = ("a100_80gb", "h100_80gb", "h200_141gb", "l40s")  # planned in this order (sorted)


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


def _services(db: Database, **kw: Any) -> Services:
    return build_services(Settings(db_url=db.url, reconcile_interval_s=0), clock=FixedClock(NOW_S), **kw)


def _recorded(db: Database) -> list[dict[str, Any]]:
    with db.engine.connect() as conn:
        got = conn.execute(select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass"))
        return [json.loads(d) for d in got.scalars()]


class _BrokenBlocks:
    """A Capacity Block service whose reconcile raises (the EC2 API answering garbage, a bug)."""

    def reconcile(self, actor: Actor) -> dict[str, list[str]]:
        raise RuntimeError("DescribeCapacityBlockOfferings answered nonsense")


def test_a_failing_provider_stage_or_capacity_blocks_stage_is_reported_and_the_pass_goes_on(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: ``Reconciler.run_once`` called ``ReservationService.reconcile`` and
    ``CapacityBlockService.reconcile`` bare: either raising (a provider answer the adapter cannot read, a database
    error of its own) ended the whole pass, so no SKU was forecast or planned and no placement re-evaluated, at every
    pass, for as long as that one step failed. Each SKU and cluster already failed alone; now these two steps do
    too: the failure is reported in the stage's entry (``error``) and the other stages run, the pass recorded."""
    s = _services(database)
    s.ingest.ingest(Actor("bob", Role.ML_PLATFORM_ADMIN, None), _records("h100_80gb", NOW_S - 28 * DAY, 28, 24))

    def broken(**_kw: Any) -> Any:
        raise RuntimeError("provider answered a shape the adapter cannot read")

    monkeypatch.setattr(s.reservations, "reconcile", broken)
    rec = Reconciler(s.engine, s.clock, reservations=s.reservations, capacity=s.capacity, procurement=s.procurement,
                     binpack=s.binpack, capacity_blocks=_BrokenBlocks())  # type: ignore[arg-type]  # fmt: skip
    try:
        done = rec.run_once()
    finally:
        s.engine.dispose()
    assert "provider answered" in done.provider["error"], done.provider
    assert done.capacity_blocks is not None and "nonsense" in done.capacity_blocks["error"], done.capacity_blocks
    assert [f["sku"] for f in done.forecasts] == ["h100_80gb"] and "error" not in done.forecasts[0]
    assert done.proposals and done.proposals[0]["created"], done.proposals  # the SKU was planned all the same
    recorded = _recorded(database)
    assert len(recorded) == 1 and "error" in recorded[0]["provider"]


@pytest.mark.postgres
def test_a_store_that_blocks_every_sku_stops_the_pass_after_a_few_timeouts(pg_database: Database) -> None:
    """Review (fixed), the defect: a lock that blocks every SKU's write (here the SHARE lock an index build on
    ``reservations`` holds, or an admin's ``LOCK TABLE`` left open) cost one statement timeout per SKU-region: the pass
    waited ``N x db_statement_timeout_s`` (minutes to hours on a real catalog, 30 s each) before reporting the same
    error N times. Now the pass notices the store is blocked (two SKU steps in a row failing on the store's
    availability) and stops: the rest are listed as skipped, ``stopped`` says the store is blocked."""
    timeout_s = 1.0
    engine = make_engine(pg_database.url, statement_timeout_s=timeout_s)
    s = build_services(Settings(db_url=pg_database.url, reconcile_interval_s=0), engine=engine,
                       clock=FixedClock(NOW_S))  # fmt: skip
    admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
    for sku in SKUS:
        s.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))
    holder = create_engine(pg_database.url)
    try:
        with holder.connect() as other:
            # what CREATE INDEX (without CONCURRENTLY) on reservations holds: reads go on, every insert waits
            other.execute(text("LOCK TABLE reservations IN SHARE MODE"))
            started = time.monotonic()
            done = s.reconciler.run_once()
            took_s = time.monotonic() - started
            other.rollback()
    finally:
        holder.dispose()
        engine.dispose()
    timed_out = [p for p in done.proposals if "statement timeout" in p.get("error", "")]
    assert len(done.proposals) == len(SKUS), done.proposals  # every SKU is named...
    assert len(timed_out) <= 2, [p.get("error") for p in done.proposals]  # ...but not each waited for
    assert [p["sku"] for p in done.proposals if p.get("skipped")] == list(SKUS[2:]), done.proposals
    assert done.stopped and "blocked" in done.stopped, done.as_dict()
    assert took_s < 2 * timeout_s + 30, took_s
