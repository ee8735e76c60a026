"""Review (hostile): concurrent first writes of "set or replace" resources. The services read the row, find
none, and INSERT; on PostgreSQL two such requests both insert and the loser's unique violation (IntegrityError)
reaches no handler: 500 instead of one of them winning (last write wins, as the PUT promises)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from tests.integration.conftest import Database, LiveServer, ServerFactory

RACERS = 8


def _race(s: LiveServer, token: str, send: Callable[[httpx.Client], httpx.Response]) -> list[int]:
    """``RACERS`` requests released together, each on its own connection; their status codes."""
    codes: list[int] = []
    gate = threading.Barrier(RACERS)

    def one() -> None:
        with httpx.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            gate.wait()
            codes.append(send(c).status_code)

    threads = [threading.Thread(target=one) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def test_concurrent_first_budget_puts_are_never_a_500(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: BudgetService.set (service/budgets.py set: ``SELECT ... FOR UPDATE`` finds no row,
    then ``uow.session.add(TeamBudgetRow(...))``) locks nothing when the team has no budget yet; concurrent first PUTs
    on PostgreSQL each INSERT and all but one fail on the primary key with an unhandled IntegrityError: 500. Expected:
    every PUT answers 200 (the budget is set; the last one wins)."""
    s = make_server(database)
    token = s.token("finops_admin", "fran")
    with s.client("ml_platform_admin", "adm") as c:
        for i in range(4):
            assert c.post("/v1/teams", json={"id": f"race{i}", "name": "r"}).status_code == 201
    codes = []
    for i in range(4):
        codes += _race(s, token, lambda c, i=i: c.put(f"/v1/teams/race{i}/budget", json={"limit_usd": "100"}))
    assert all(code == 200 for code in codes), sorted(codes)


def test_concurrent_first_pool_signals_are_never_a_500(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: PlacementChainService.set_signal (service/placement_chain.py set_signal:
    ``session.get`` finds no signal, then ``session.add``) takes no lock on PostgreSQL; concurrent first PUT
    /v1/placement/signals for a pool each INSERT and the losers' primary-key violation is a 500. Expected: 200 for each
    (last write wins)."""
    s = make_server(database)
    token = s.token("ml_platform_admin", "adm")
    with s.client("ml_platform_admin", "adm") as c:
        pools = [p["id"] for p in c.get("/v1/pools", params={"limit": 4}).json()]
    codes = []
    for pool in pools:
        codes += _race(s, token, lambda c, p=pool: c.put("/v1/placement/signals", json={"pool": p, "stockout": True}))
    assert all(code == 200 for code in codes), sorted(codes)
