"""Review (reconcile): a pass whose write for one SKU fails (a PostgreSQL row lock held by another session, so the
statement times out) must still plan the other SKUs, report the failing one and record itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, _make_database
from tests.integration.pg_pool import SchemaPool

DAY = 86_400
LOCKED, FREE = "a100_80gb", "h100_80gb"  # planned in this order (sorted)


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None, pg_schemas: SchemaPool) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason, schemas=pg_schemas)


def _records(sku: str, start_s: int, days: int, gpus: float) -> list[dict[str, Any]]:
    return [
        {"source": "dcgm", "bucket_start_s": start_s + d * DAY + h * 3600, "bucket_s": 3600, "workload_id": f"wl-{sku}",
         "team_id": "team-p", "sku_id": sku, "pool_id": f"aws/us-east-1/{sku}/on_demand", "gpus_allocated": gpus,
         "gpu_util": 0.6}
        for d in range(days)
        for h in range(24)
    ]  # fmt: skip


@pytest.mark.postgres
def test_a_sku_whose_order_cannot_be_written_does_not_stop_the_others(pg_database: Database) -> None:
    """Review (fixed), the defect: ``Reconciler.run_once`` reported a failing SKU only when it failed with a
    ``GpufleetError``. Another session holds ``FOR UPDATE`` on the first SKU's reserved pool (an admin's open
    transaction), so the insert of its order (whose foreign key takes ``FOR KEY SHARE`` on that row) times out: the
    OperationalError ended the whole pass. The next SKU was never planned and the pass not recorded, so ``due`` was
    true again at once: the background loop re-ran the whole pass (every SKU's forecast) every leader poll, failing
    the same way each time. Now any error of one SKU (or cluster) is reported in its entry and the pass goes on."""
    engine: Engine = make_engine(pg_database.url, statement_timeout_s=2)
    services = build_services(Settings(db_url=pg_database.url, reconcile_interval_s=0), engine=engine,
                              clock=FixedClock(NOW_S))  # fmt: skip
    admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
    for sku in (LOCKED, FREE):
        services.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))
    holder = create_engine(pg_database.url)
    try:
        with holder.connect() as other:
            other.execute(
                text("SELECT id FROM pools WHERE id = :p FOR UPDATE"), {"p": f"aws/us-east-1/{LOCKED}/reserved"}
            )
            done = services.reconciler.run_once()  # the lock is held for the whole pass
            other.rollback()
    finally:
        holder.dispose()
    by_sku = {p["sku"]: p for p in done.proposals}
    assert "statement timeout" in by_sku[LOCKED]["error"] and by_sku[LOCKED]["created"] == [], by_sku[LOCKED]
    assert by_sku[FREE]["created"], by_sku[FREE]  # the other SKU was planned
    with engine.connect() as conn:
        made = conn.execute(select(ReservationRow.sku_id)).scalars().all()
        passes = conn.execute(select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass"))
        recorded = [json.loads(d) for d in passes.scalars()]
    assert made == [FREE]
    assert len(recorded) == 1 and "statement timeout" in recorded[0]["proposals"][0]["error"]
    assert not services.reconciler.due(86_400, NOW_S)  # recorded: not re-run before the next period
    engine.dispose()
