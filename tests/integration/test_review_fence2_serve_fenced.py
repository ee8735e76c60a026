"""Review (fence2): the leader loop of ``gpufleet serve`` (``_LeaderLoop.step``) when one of its writes is fenced out:
its lead was lost right after it confirmed it, another process took the lead (a new fencing epoch), and the
provider reconcile's write rolls back (``FencedOut``). The process must stop acting as leader, keep serving, and
lose nothing an API request committed."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import ReservationRow
from gpufleet.api.app import _LeaderLoop
from gpufleet.service.auth import Actor, Role, issue_token
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.leader import AdvisoryLockLeader
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, LiveServer, _make_database
from tests.integration.pg_pool import SchemaPool
from tests.integration.test_review_reconcile_leader import _kill_lock_session


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None, pg_schemas: SchemaPool) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason, schemas=pg_schemas)


class _Ids:
    def new(self, prefix: str) -> str:
        return f"{prefix}_{secrets.token_hex(8)}"


class _LosesLeadAfterRefresh:
    """A's election: the real advisory lock, whose lead (when ``lose`` is set) is lost right after a refresh confirmed
    it: its lock session killed and ``other`` taking the lead (a new epoch) before A's next write commits."""

    def __init__(self, inner: AdvisoryLockLeader, other: Services, url: str) -> None:
        self.inner, self.other, self.url, self.lose = inner, other, url, False

    def is_leader(self) -> bool:
        return self.inner.is_leader()

    def refresh(self) -> bool:
        got = self.inner.refresh()
        if got and self.lose:
            self.lose = False
            _kill_lock_session(self.url)
            assert self.other.leader.refresh()
        return got

    def close(self) -> None:
        self.inner.close()

    def epoch(self) -> int | None:
        return self.inner.epoch()


@pytest.mark.postgres
def test_a_fenced_out_leader_loop_stops_leading_keeps_serving_and_keeps_the_requests_data(
    pg_database: Database,
) -> None:
    """Review (fixed), the defect: ``_LeaderLoop.step`` caught ``FencedOut`` and cleared its own ``_leading`` flag only;
    the process's election still answered "leading" from its cache (up to ``leader_poll_s``), so a request on it
    (an approval completing its set: ``may_submit`` is ``leader.is_leader``) went on submitting to the provider as
    leader, unfenced, beside the new leader. Now a fenced-out pass gives up the lead at once (``leader.close()``); the
    approval the request committed stays approved, is served, and the new leader submits it (one order)."""
    sim = SimulatedProvider(pg_database.engine)
    settings = Settings(db_url=pg_database.url, reconcile_interval_s=0, leader_poll_s=60)  # a long cache: visible
    b = build_services(settings, clock=FixedClock(NOW_S), provider=sim)
    engine_a = make_engine(pg_database.url)
    lead_a = _LosesLeadAfterRefresh(AdvisoryLockLeader(engine_a, poll_s=60), b, pg_database.url)
    a = build_services(settings, engine=engine_a, clock=FixedClock(NOW_S), provider=sim, leader=lead_a)
    server: LiveServer | None = None
    try:
        # its start-up pass takes the lead; no periodic pass: the loop is stepped by hand
        server = LiveServer(a).start()
        assert a.leader.refresh() and not b.leader.refresh()  # A leads
        carol = Actor("carol", Role.ML_PLATFORM_ADMIN, None)
        res = a.reservations.create(carol, sku_id="h100_80gb", units=8, start_s=NOW_S + 86_400, term_months=1,
                                    regions=["us-east-1"])  # fmt: skip
        token = issue_token(a.engine, a.clock, _Ids(), role="finops_admin", user_id="alice", team_id=None).token
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        for _ in range(3):  # the approval's own submission does not reach the provider
            sim.inject("timeout_before_order")
        got = api.post(f"/v1/reservations/{res.id}/approve", json={"budget_code": "X"})
        assert got.status_code == 200 and got.json()["status"] == "approved", got.text  # the request's data

        lead_a.lose = True  # A's next pass confirms its lead, then loses it to B before its write commits
        _LeaderLoop(a).step()  # the fenced write rolls back; the step returns (logged), it does not raise
        assert not a.leader.is_leader(), "A still answers that it leads after its write was fenced out"
        assert sim.calls == 4  # A's stale pass reached the provider once (same key: deduplicated below)

        got = api.get(f"/v1/reservations/{res.id}")  # A keeps serving
        assert got.status_code == 200 and got.json()["status"] == "approved", got.text
        assert api.get("/readyz").status_code == 200

        _LeaderLoop(b).step()  # the new leader submits the approved reservation
        with pg_database.engine.connect() as c:
            row = c.execute(select(ReservationRow.status, ReservationRow.provider_order_id)).one()
        assert row.status == "submitted" and len(sim.orders()) == 1, (row, sim.orders())
        assert row.provider_order_id == sim.orders()[0].order_id
    finally:
        if server is not None:
            server.stop()
        for s in (a, b):
            s.leader.close()
            s.engine.dispose()
