"""A placement admitted (``"admit": true``, booked against the team's budget) while its pool is being deleted, on
SQLite and PostgreSQL. The placement reads the pools without a lock (one autocommit read); the booking happens
later, in the budget's transaction. docs/api.md: a pool is not deleted while a budget commitment that has not ended
names it, so a booking must never name a pool that is gone."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import text

from gpufleet.control.admission import ChainPlacementRequest
from gpufleet.domain.errors import ConflictError
from gpufleet.domain.workloads import Priority, WorkloadKind
from gpufleet.service.auth import Actor, Role
from gpufleet.service.budgets import BudgetService
from gpufleet.service.clock import FixedClock
from gpufleet.service.placement_chain import ChainPlacementService
from gpufleet.service.registry import RegistryService
from tests.integration.conftest import NOW_S, Database, ServerFactory

POOL = "aws/us-east-1/h100_80gb/on_demand"
ADMIN = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
REQ = ChainPlacementRequest(WorkloadKind.TRAINING, Priority.NORMAL, "h100_80gb", 8, team="t-del", admit=True,
                            expected_run_s=3600)  # fmt: skip


class _PoolDeletedBeforeBooking(BudgetService):
    """The budget stage, with the pool the placement chose deleted (and committed) just before it books: the
    interleaving a concurrent ``DELETE /v1/pools/...`` produces, made deterministic."""

    def __init__(self, engine: Any, clock: FixedClock, registry: RegistryService) -> None:
        super().__init__(engine, clock)
        self._registry = registry

    def admit_placement(self, actor: Actor, team_id: str, **kw: Any) -> Any:
        self._registry.delete(ADMIN, "pool", kw["preferred"].pool_id)
        return super().admit_placement(actor, team_id, **kw)


def _orphans(database: Database) -> list[tuple[Any, ...]]:
    with database.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT id, pool_id FROM budget_commitments WHERE pool_id IS NOT NULL "
            "AND pool_id NOT IN (SELECT id FROM pools)"
        ))]  # fmt: skip


def _team_with_budget(database: Database, clock: FixedClock) -> RegistryService:
    registry = RegistryService(database.engine, clock)
    registry.create(ADMIN, "team", {"id": "t-del", "name": "deleting"})
    BudgetService(database.engine, clock).set(ADMIN, "t-del", limit_usd=Decimal(10_000), period="month", enforce=True)
    return registry


def test_a_booking_never_names_a_pool_deleted_after_the_placement_read_it(database: Database) -> None:
    """Review (fixed), the defect: BudgetService._decide booked the commitment for the pool the placement had read
    without checking the pool still existed, so a pool deleted in between left a commitment naming a deleted pool
    (and the spend charged nowhere); now the booking holds the pool (FOR KEY SHARE on PostgreSQL) and answers 409."""
    clock = FixedClock(NOW_S)
    registry = _team_with_budget(database, clock)
    placement = ChainPlacementService(database.engine, clock, _PoolDeletedBeforeBooking(database.engine, clock,
                                                                                        registry))  # fmt: skip
    with pytest.raises(ConflictError, match=POOL):
        placement.recommend(ADMIN, REQ)
    assert _orphans(database) == []
    with database.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM budget_commitments")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM pools WHERE id = :p"), {"p": POOL}).scalar_one() == 0
    # the next request places on what is left (the pool is gone; the chain moves on) and books it
    out = ChainPlacementService(database.engine, clock, BudgetService(database.engine, clock)).recommend(ADMIN, REQ)
    assert out["pool"] != POOL and out["budget"]["booked"] is True


@pytest.mark.postgres
@pytest.mark.parametrize("database", ["postgres"], indirect=True)
def test_a_pool_delete_racing_a_booking_over_http_leaves_no_orphan(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the same defect over HTTP on PostgreSQL with real concurrency: the booking is held on the
    budget row's lock (another transaction holds it) after the placement read the pools; the pool's DELETE commits
    meanwhile. Before: the booking then committed a commitment naming the deleted pool. Now: 409, nothing booked."""
    server = make_server(database, clock=FixedClock(NOW_S))
    with server.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/teams", json={"id": "t-del", "name": "deleting"}).status_code == 201
        assert c.put("/v1/teams/t-del/budget", json={"limit_usd": 10_000}).status_code == 200
    body = {"job_class": "training", "priority": "normal", "sku": "h100_80gb", "gpus": 8, "team": "t-del",
            "expected_run_s": 3600, "admit": True}  # fmt: skip
    answer: dict[str, Any] = {}
    with database.engine.connect() as blocker:
        blocker.execute(text("SELECT 1 FROM team_budgets WHERE team_id = 't-del' FOR UPDATE"))

        def place() -> None:
            with server.client("ml_platform_admin", "bob") as c:
                r = c.post("/v1/placement/recommendations", json=body)
                answer.update(status=r.status_code, body=r.json())

        t = threading.Thread(target=place)
        t.start()
        deadline = time.monotonic() + 10
        # wait until the booking waits on the budget row's lock (autocommit: each poll reads a fresh pg_stat_activity)
        with database.engine.execution_options(isolation_level="AUTOCOMMIT").connect() as probe:
            while not probe.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%team_budgets%'"
            )).scalar_one():  # fmt: skip
                assert time.monotonic() < deadline, "the booking never waited on the budget row"
                time.sleep(0.02)
        with server.client("ml_platform_admin", "bob") as c:
            assert c.delete(f"/v1/pools/{POOL}").status_code == 204  # nothing names it yet
        blocker.rollback()
    t.join(30)
    assert _orphans(database) == []
    assert answer["status"] == 409 and POOL in answer["body"]["detail"], answer
