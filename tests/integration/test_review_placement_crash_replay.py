"""Review (placement, session place3) over HTTP on SQLite and PostgreSQL: an admission retried under its
``Idempotency-Key`` after the server died between the booking's commit and its answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx

from tests.integration.conftest import Database, LiveServer, ServerFactory

URL = "/v1/placement/recommendations"
OD = "aws/us-east-1/h100_80gb/on_demand"
JOB = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"]}


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _crash_after_commit(s: LiveServer) -> None:
    """The budget's batched booking commits, then the process "dies" before the request is answered."""
    bookings = s.services.budgets._bookings
    run: Callable[[str, Sequence[Any]], Sequence[Any]] = bookings._run

    def committed_then_crashed(team: str, asks: Sequence[Any]) -> Sequence[Any]:
        run(team, asks)
        raise RuntimeError("the process died after the booking committed")

    bookings._run = committed_then_crashed


def test_a_retry_after_a_crash_answers_what_was_booked(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the answer of a budgeted admission (its booking is made in the budget's batched
    transaction) was written under its ``Idempotency-Key`` only after that transaction committed. A server that died
    in between left the key with a booking and no answer: every retry under the key waited 10 s and answered 409
    ("booked ... but its answer was not recorded") for the key's whole retention, so the caller could never learn what
    was booked (nor release it). Expected: the answer is recorded in the transaction that books; a retry after the
    crash (on a restarted server) answers what was booked, and books nothing again."""
    s1 = make_server(database)
    with s1.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 32, "allocated_gpus": 0}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "100000"}).status_code == 200
    body = {**JOB, "team": "vision", "expected_run_s": 3600, "admit": True}
    _crash_after_commit(s1)
    with s1.client("ml_platform_admin", "ada") as a:
        assert a.post(URL, json=body, headers={"Idempotency-Key": "train-1"}).status_code == 500
    with s1.client("ml_platform_admin", "ada") as a:  # a new connection: the failed one may be closed
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8  # booked before the crash
    s1.stop()
    s2 = make_server(database)  # the restarted service
    with s2.client("ml_platform_admin", "ada") as a:
        got = _ok(a.post(URL, json=body, headers={"Idempotency-Key": "train-1"}))
        assert (got["action"], got["pool"], got["gpus"]) == ("place", OD, 8), got
        assert got["budget"]["booked"] is True and got["budget"]["action"] == "admit", got
        assert _ok(a.post(URL, json=body, headers={"Idempotency-Key": "train-1"})) == got
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8  # nothing booked again
        assert len(a.get("/v1/audit", params={"action": "budget.admission"}).json()) == 1
        # the answer replayed is the one a first request gets: compare with a fresh admission's shape
        fresh = _ok(a.post(URL, json=body, headers={"Idempotency-Key": "train-2"}))
        assert fresh.keys() == got.keys() and fresh["budget"].keys() == got["budget"].keys()
        assert fresh["budget"]["limit_usd"] == got["budget"]["limit_usd"]
