"""Review (fencing): a reconciler leader stuck inside a write transaction (waiting on a lock, a GC pause, a slow
disk) while it loses the lead and another process takes over and runs its own pass; when the stuck write resumes it
must not commit: the new leader already decided without it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from gpufleet.service.uow import UnitOfWork, fenced
from tests.integration.conftest import NOW_S, Database, _make_database
from tests.integration.pg_pool import SchemaPool
from tests.integration.test_review_reconcile_leader import _kill_lock_session
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400
SKU = "h100_80gb"


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None, pg_schemas: SchemaPool) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason, schemas=pg_schemas)


def _process(db: Database, now_s: int) -> Services:
    """One reconciler process: its own engine, its own election (the advisory lock), its own clock."""
    return build_services(Settings(db_url=db.url, reconcile_interval_s=0, leader_poll_s=0.05,
                                   db_statement_timeout_s=5), clock=FixedClock(now_s))  # fmt: skip


@pytest.mark.postgres
def test_a_leader_stuck_inside_a_write_does_not_commit_after_another_took_the_lead(pg_database: Database) -> None:
    """Review (fixed), the defect: the pass confirmed the lead before each SKU-region (``Reconciler._lost_lead``) but
    not inside the write: a leader whose order transaction stalled after that check (here: stuck right after the
    order's INSERT) went on to commit after its lock session was killed and a second process had taken the lead and
    run its own pass (a day later by its clock, so its order has another key). Both orders landed: two leaders'
    orders for the same need. Now each leader takes a fencing epoch (``leader_fence``, bumped when the lock is
    taken) and every write transaction of its pass checks that epoch under a share lock before it commits: the stale
    leader's order rolls back and its pass stops (``stopped``: fenced out), unrecorded."""
    a, b = _process(pg_database, NOW_S), _process(pg_database, NOW_S + DAY)
    main = threading.main_thread()
    stalled: list[dict[str, Any]] = []

    def stall(session: Session, _ctx: object) -> None:
        """A's order transaction, after its INSERT and before its commit: A loses the lead, B leads and plans."""
        if stalled or threading.current_thread() is not main:
            return
        if not any(isinstance(o, ReservationRow) for o in session.new):
            return
        _kill_lock_session(pg_database.url)
        got: dict[str, Any] = {}

        def other() -> None:
            got["leads"] = b.leader.refresh()
            got["pass"] = b.reconciler.run_once().as_dict()

        t = threading.Thread(target=other)
        t.start()
        t.join(60)
        stalled.append(got)

    try:
        admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
        b.ingest.ingest(admin, _records(SKU, NOW_S - 28 * DAY, 29, 24))  # up to B's day
        assert a.leader.refresh() and not b.leader.refresh()
        event.listen(Session, "after_flush", stall)
        try:
            done = a.reconciler.run_once()
        finally:
            event.remove(Session, "after_flush", stall)
        assert stalled and stalled[0]["leads"], stalled  # B took the lead while A's write was stuck
        b_created = [c for p in stalled[0]["pass"]["proposals"] for c in p["created"]]
        assert b_created, stalled[0]["pass"]["proposals"]  # B proposed its own order, not seeing A's (uncommitted)
        with pg_database.engine.connect() as conn:
            made = conn.execute(select(ReservationRow.id, ReservationRow.created_at_s)).all()
            passes = conn.execute(
                select(AuditEventRow.entity_id).where(AuditEventRow.action == "reconciler.pass")
            ).all()
        assert sorted(r.id for r in made) == sorted(b_created), made  # only the new leader's order landed
        assert {r.created_at_s for r in made} == {NOW_S + DAY}, made
        assert done.stopped and "fenc" in done.stopped, done.as_dict()  # A says it stopped, fenced out
        assert len(passes) == 1, passes  # only B's pass is recorded
    finally:
        for s in (a, b):
            s.leader.close()
            s.engine.dispose()


@pytest.mark.postgres
def test_a_leader_cut_off_between_its_fence_check_and_its_commit_does_not_hold_the_next_leader_off(
    pg_database: Database,
) -> None:
    """Review (fixed, found with the fencing fix): the fence check holds a share lock on ``leader_fence`` until the
    commit that follows, so a new leader's bump waits for a write that passed the check. A process cut off from the
    database right there (a partition, a paused VM) leaves its transaction open on the server until the server's TCP
    keepalive notices (two hours by default: the pool's connections set keepalives on the client side only), and no
    process could take the lead meanwhile. Now the check also sets ``idle_in_transaction_session_timeout`` (the
    statement timeout) for the rest of its transaction: the server ends the stalled session, the bump goes on, and
    the stalled write never commits."""
    engine = make_engine(pg_database.url, statement_timeout_s=1.0)
    stall_s = 4.0
    bumped: dict[str, float] = {}

    def bump() -> None:
        started = time.monotonic()
        with pg_database.engine.begin() as c:  # what a new leader's bump does (statement timeout 30 s)
            c.execute(text("UPDATE leader_fence SET epoch = epoch + 1 WHERE id = 1"))
        bumped["after_s"] = time.monotonic() - started

    def stall(session: Session) -> None:  # after the fence check, before the COMMIT reaches the server
        t = threading.Thread(target=bump)
        t.start()
        time.sleep(stall_s)  # the process is cut off; the bump waits for its share lock...
        t.join(30)

    with pg_database.engine.connect() as c:
        epoch = int(c.scalar(text("SELECT epoch FROM leader_fence WHERE id = 1")))
    event.listen(Session, "before_commit", stall)
    try:
        with pytest.raises(DBAPIError), fenced(epoch), UnitOfWork(engine, write=True) as uow:
            uow.audit(at_s=NOW_S, actor="stale", action="t.stalled", entity="t", entity_id="t")
            uow.commit()
    finally:
        event.remove(Session, "before_commit", stall)
        engine.dispose()
    assert bumped["after_s"] < stall_s - 1, bumped  # ...only until the server ended the stalled session
    with pg_database.engine.connect() as c:
        assert c.scalar(text("SELECT count(*) FROM audit_events WHERE action = 't.stalled'")) == 0
