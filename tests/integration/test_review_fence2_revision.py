"""Review (fence2): ``gpufleet serve`` keeps running while its store is moved to another schema revision (the store
went away and came back restored from an older backup, or upgraded by a newer release's ``gpufleet db upgrade``).
The controller re-checks the revision when the store answers again (``RevisionGate``); the server's leader loop,
which writes into the store and calls the provider with no one watching, must not act with its old model either."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select, text

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql.migrate import head_revision
from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.api.app import _LeaderLoop
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.leader import AdvisoryLockLeader
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database

FUTURE = "0099_a_newer_release"


def _stamp(db: Database, revision: str) -> None:
    with db.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


def _events(db: Database) -> int:
    with db.engine.connect() as c:
        return int(c.scalar(select(func.count()).select_from(AuditEventRow)) or 0)


def test_the_leader_loop_does_not_act_on_a_store_moved_to_another_revision(database: Database) -> None:
    """Review (fixed), the defect: the store's schema revision was checked at start only (``build_services``);
    ``/readyz`` answered 503 once it moved, but the leader loop (``_LeaderLoop.step``: the provider reconcile, the
    submissions, the planning pass) went on writing and ordering from the provider with the model of the revision it
    started at, and kept the lead from the processes at the store's revision. Now each step reads the revision first
    (``RevisionWatch``): at another one the process gives up the lead and acts on nothing (a request's approval does
    not submit either), and resumes once the store is back at its revision."""
    sim = SimulatedProvider(database.engine)
    s = build_services(Settings(db_url=database.url, reconcile_interval_s=30, leader_poll_s=0.05),
                       clock=FixedClock(NOW_S), provider=sim)  # fmt: skip
    other: AdvisoryLockLeader | None = None
    try:
        carol, alice = Actor("carol", Role.ML_PLATFORM_ADMIN, None), Actor("alice", Role.FINOPS_ADMIN, None)
        for _ in range(3):
            sim.inject("timeout_before_order")  # the approval's own submission never reaches the provider
        res = s.reservations.create(carol, sku_id="h100_80gb", units=8, start_s=NOW_S + 86_400, term_months=1,
                                    regions=["us-east-1"])  # fmt: skip
        assert s.reservations.approve(alice, res.id, approver_ids=None, budget_code="X").status.value == "approved"
        _stamp(database, FUTURE)  # a newer release upgraded the store (while it was away, or not)
        before = _events(database)
        loop = _LeaderLoop(s)
        loop.step()  # the start-up pass: as leader, reconcile with the provider
        loop.step()
        assert sim.orders() == [], "the leader ordered from the provider at another schema revision"
        assert _events(database) == before, "the leader wrote into a store at another schema revision"
        if database.backend == "postgres":  # it does not sit on the lead either: a process at the store's revision
            other = AdvisoryLockLeader(database.engine, poll_s=0.05)  # (the newer release's) can take it
            assert other.refresh(), "the process at another revision kept the lead"
            other.close()
            other = None
        _stamp(database, head_revision(database.engine))  # back at this code's revision: the loop resumes by itself
        loop.step()
        with database.engine.connect() as c:
            assert c.scalar(select(ReservationRow.status).where(ReservationRow.id == res.id)) == "submitted"
        assert len(sim.orders()) == 1
    finally:
        if other is not None:
            other.close()
        s.leader.close()
        s.engine.dispose()


def test_the_reconcile_loop_does_not_lead_on_a_store_moved_to_another_revision(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect (as the leader loop's): ``gpufleet reconcile`` without ``--once`` checked the
    revision at start only and led, and ran its passes, whatever revision the store was moved to afterwards. Now each
    check reads it first: at another revision the loop does not lead and says why, then leads again once it is back."""
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    moves = iter([FUTURE, head_revision(database.engine)])

    def sleep(_s: float) -> None:  # between two checks, the store is moved to another revision, then back
        _stamp(database, next(moves, head_revision(database.engine)))

    monkeypatch.setattr("gpufleet.cli.cmd_reconcile.time.sleep", sleep)
    got = CliRunner().invoke(app, ["reconcile", "--db", database.url, "--interval-s", "0.05", "--passes", "3"])
    assert got.exit_code == 0, got.output
    lines = [json.loads(line) for line in got.output.splitlines() if line.startswith("{")]
    assert lines == [{"leader": False, "error": lines[0].get("error")}], got.output
    assert FUTURE in lines[0]["error"], lines
