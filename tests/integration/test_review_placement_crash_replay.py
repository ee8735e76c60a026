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


def test_the_recorded_answer_is_the_one_returned_for_a_degrade_and_a_preemption(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (holds): the answer recorded in the budget's batch is rebuilt from the budget's outcome; for an
    over-budget degrade and for a preemption under a budget it is the answer the first request got, and what a
    retry after a crash answers (and the release of the degrade gives back the degraded option's GPUs)."""
    s1 = make_server(database)
    with s1.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 8}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "500", "period": "month"}).status_code == 200
        job = {**JOB, "team": "vision", "expected_run_s": 86_400, "admit": True}
        degrade = {**job, "degrade_options": [{"gpus": 2}]}
        first = _ok(a.post(URL, json=degrade, headers={"Idempotency-Key": "d"}))
        assert (first["action"], first["reason"], first["gpus"]) == ("degrade", "over_budget_degraded", 2), first
        assert _ok(a.post(URL, json=degrade, headers={"Idempotency-Key": "d"})) == first
        pre = {**job, "expected_run_s": 600, "gpus": 12, "running": [{"workload_id": "x", "pool": OD, "gpus": 8,
                                                                       "priority": "low"}]}  # fmt: skip
        _crash_after_commit(s1)
        assert a.post(URL, json=pre, headers={"Idempotency-Key": "p"}).status_code == 500
    s1.stop()
    s2 = make_server(database)
    with s2.client("ml_platform_admin", "ada") as a:
        got = _ok(a.post(URL, json=pre, headers={"Idempotency-Key": "p"}))
        assert (got["action"], got["victims"], got["budget"]["booked"]) == ("preempt", ["x"], True), got
        assert (
            a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8 + 2 + 4
        )  # the degrade's 2, the 4 free GPUs the preemption took
        assert _ok(a.post(URL, json=degrade, headers={"Idempotency-Key": "d"})) == first
        rel = _ok(a.delete("/v1/placement/admissions/d"))
        assert (rel["gpus_returned"], rel["budget_commitment_ended"]) == (2, True), rel
        rel = _ok(a.delete("/v1/placement/admissions/p"))
        assert (rel["gpus_returned"], rel["victims_released"], rel["budget_commitment_ended"]) == (4, ["x"], True)
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
