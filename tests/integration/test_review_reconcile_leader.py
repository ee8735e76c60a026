"""Review (reconcile): two reconciler processes on one PostgreSQL store, the leader losing its lock in the middle
of a pass (its lock session killed: ``pg_terminate_backend``, a network cut of that one connection, a pooler that
dropped it) while the other takes the lead."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, select, text
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.leader import LOCK_NAME
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, _make_database

DAY = 86_400
FIRST, SECOND = "a100_80gb", "h100_80gb"  # planned in this order (sorted)


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


def _records(sku: str, start_s: int, days: int, gpus: float) -> list[dict[str, Any]]:
    return [
        {"source": "dcgm", "bucket_start_s": start_s + d * DAY + h * 3600, "bucket_s": 3600, "workload_id": f"wl-{sku}",
         "team_id": "team-l", "sku_id": sku, "pool_id": f"aws/us-east-1/{sku}/on_demand", "gpus_allocated": gpus,
         "gpu_util": 0.6}
        for d in range(days)
        for h in range(24)
    ]  # fmt: skip


def _process(db: Database) -> Services:
    """One reconciler process's services: its own engine, its own leader election (the advisory lock)."""
    return build_services(Settings(db_url=db.url, reconcile_interval_s=0, leader_poll_s=0.05),
                          clock=FixedClock(NOW_S))  # fmt: skip


_HOLDERS = text(
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND ((classid::bigint << 32) | objid::bigint) = :k AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


def _kill_lock_session(url: str) -> None:
    """Terminate the session holding the schema's leader lock (what an admin, a pooler or a cut connection does),
    and return once the lock is free: ``pg_terminate_backend`` only signals the backend, which releases the lock
    when it has exited, a moment later (test_review_serve_kill_lock.py)."""
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            key = c.scalar(text("SELECT hashtextextended(:n || current_schema(), 0)"), {"n": LOCK_NAME})
            pids = c.scalars(_HOLDERS, {"k": key}).all()
            assert len(pids) == 1, pids
            c.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pids[0]})
            deadline = time.monotonic() + 10
            while c.scalars(_HOLDERS, {"k": key}).all():
                assert time.monotonic() < deadline, f"the killed session {pids[0]} still holds the leader lock"
                time.sleep(0.01)
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_a_leader_that_loses_its_lock_mid_pass_writes_no_more(pg_database: Database) -> None:
    """Review (fixed), the defect: ``Reconciler.run_once`` checked nothing once it had started (the caller checked
    the lead before the pass; a pass forecasts and plans every SKU, minutes on a real catalog). Here the first
    process's lock session is killed right after its first order commits, and the second process takes the lead: the
    first went on, proposed the next SKU's order and recorded its pass as if it still led, beside the new leader's
    own: two processes proposing at once, which the lock exists to prevent (service/leader.py). Now the pass confirms
    the lead before each SKU-region's proposals and before recording itself, and stops."""
    a, b = _process(pg_database), _process(pg_database)
    fired: list[bool] = []

    def lose_the_lead(session: Session) -> None:
        if fired or not session.info.get("wrote_reservation"):
            return
        fired.append(True)
        _kill_lock_session(pg_database.url)
        assert b.leader.refresh()  # the other process leads now

    def mark(session: Session, _ctx: object) -> None:
        if any(isinstance(o, ReservationRow) for o in session.new):
            session.info["wrote_reservation"] = True

    try:
        admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
        for sku in (FIRST, SECOND):
            a.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))
        assert a.leader.refresh() and not b.leader.refresh()
        event.listen(Session, "after_flush", mark)
        event.listen(Session, "after_commit", lose_the_lead)
        try:
            done = a.reconciler.run_once()
        finally:
            event.remove(Session, "after_commit", lose_the_lead)
            event.remove(Session, "after_flush", mark)
        assert fired  # the lead was lost after the first SKU's order
        with pg_database.engine.connect() as conn:
            made = conn.execute(select(ReservationRow.sku_id)).scalars().all()
            passes = conn.execute(select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass"))
            recorded = [json.loads(d) for d in passes.scalars()]
        assert made == [FIRST], made  # nothing written once the lead was gone
        assert recorded == [] and done.stopped, done.as_dict()  # and the pass says it stopped, unrecorded
        again = b.reconciler.run_once()  # the new leader finishes the job
        created = {p["sku"]: p["created"] for p in again.proposals}
        assert created[FIRST] == [] and created[SECOND], created
    finally:
        for s in (a, b):
            s.leader.close()
            s.engine.dispose()
