"""Review (placement3, session 46) over HTTP on SQLite and PostgreSQL: what ``POST /v1/placement/recommendations``
with ``admit: true`` books when it is retried (``Idempotency-Key``), and what it believes of the running work a caller
lists."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Database, LiveServer, ServerFactory

URL = "/v1/placement/recommendations"
OD = "aws/us-east-1/h100_80gb/on_demand"
JOB = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"]}
RACERS = 6


def _low(workload_id: str, gpus: int = 8, pool: str = OD) -> dict[str, Any]:
    return {"workload_id": workload_id, "pool": pool, "gpus": gpus, "priority": "low"}


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _key(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def _race(s: LiveServer, token: str, body: dict[str, Any], key: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    gate = threading.Barrier(RACERS)

    def one() -> None:
        with httpx.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            gate.wait()
            r = c.post(URL, json=body, headers=None if key is None else _key(key))
            out.append({"status": r.status_code, **(r.json() if r.status_code == 200 else {"text": r.text})})

    threads = [threading.Thread(target=one) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _budget(a: httpx.Client, limit_usd: str = "100000") -> None:
    assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
    assert a.put("/v1/teams/vision/budget", json={"limit_usd": limit_usd}).status_code == 200


def test_a_retried_admission_books_once(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the placement route ignores ``Idempotency-Key``: an ``admit: true`` retried after a client timeout
    books the pool's GPUs (``allocated_gpus``), the team's budget and its victims a second time. Expected: as
    reservations do, the same key (per caller) returns the first answer and books nothing again; the same key with
    another body is a 409 naming the header; a malformed key is a 422 naming it."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 32, "allocated_gpus": 0}).status_code == 200
        _budget(a)
        body = {**JOB, "team": "vision", "expected_run_s": 3600, "admit": True}
        first = _ok(a.post(URL, json=body, headers=_key("train-1")))
        assert (first["action"], first["pool"], first["budget"]["booked"]) == ("place", OD, True), first
        again = _ok(a.post(URL, json=body, headers=_key("train-1")))
        assert again == first
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
        assert len(a.get("/v1/audit", params={"action": "budget.admission"}).json()) == 1
        assert a.get("/v1/teams/vision/budget").json()["committed_usd"] == first["budget"]["admitted_usd"]
        # without a budget, a preemption: its victim is promised once, and the retry is still told to preempt it
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 16}).status_code == 200
        pre = {**JOB, "admit": True, "running": [_low("x"), _low("y")]}
        got = _ok(a.post(URL, json=pre, headers=_key("train-2")))
        assert (got["action"], got["victims"]) == ("preempt", ["x"]), got
        assert _ok(a.post(URL, json=pre, headers=_key("train-2"))) == got
        assert len(a.get("/v1/audit", params={"action": "placement.admitted"}).json()) == 1
        # another admission is told to preempt y, not x again: x was promised once
        assert _ok(a.post(URL, json=pre, headers=_key("train-3")))["victims"] == ["y"]
        # the same key with another body: a 409 naming the header; nothing booked
        r = a.post(URL, json={**pre, "gpus": 4}, headers=_key("train-2"))
        assert r.status_code == 409 and "Idempotency-Key" in r.json()["detail"], r.text
        r = a.post(URL, json=pre, headers=_key("bad key!"))
        assert r.status_code == 422 and r.json()["field"] == "idempotency-key", r.text
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 16
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": None}).status_code == 200
    # the key is the caller's: another caller's same key is another admission
    with s.client("ml_platform_admin", "bob") as b:
        other = _ok(b.post(URL, json={**JOB, "admit": True}, headers=_key("train-2")))
        assert other["action"] == "place", other
        assert b.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 24


@pytest.mark.parametrize("budget", [False, True], ids=["no_budget", "budget"])
def test_concurrent_retries_with_one_key_book_once(
    database: Database, make_server: ServerFactory, budget: bool
) -> None:
    """Review (fixed), the defect (concurrent form): six admissions at once under one ``Idempotency-Key`` (a client that retried
    while the first was still running) each book 8 GPUs in the pool. Expected: exactly one booking, every request
    answered with it."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": None, "allocated_gpus": 0}).status_code == 200
        body: dict[str, Any] = {**JOB, "admit": True}
        if budget:
            _budget(a)
            body.update(team="vision", expected_run_s=3600)
    got = _race(s, s.token("ml_platform_admin", "ada"), body, "train-9")
    assert all(g["status"] == 200 for g in got), got
    assert all(g == got[0] for g in got), got
    assert got[0]["action"] == "place", got
    with s.client("ml_platform_admin", "ada") as a:
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
        action = "budget.admission" if budget else "placement.admitted"
        assert len(a.get("/v1/audit", params={"action": action}).json()) == 1


def test_running_work_cannot_exceed_the_pools_allocated_gpus(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the running work a caller lists is trusted as listed: in an on-demand pool with 8 GPUs of quota
    and none allocated, a 16-GPU admission listing a (made up) low-priority job of 16 GPUs there is answered
    ``preempt`` and admitted, although the pool can never hold 16 GPUs (and nothing runs in it to preempt).
    Expected: the listed running GPUs in a pool may not exceed its ``allocated_gpus`` (less the GPUs of work already
    promised to an earlier admission): 422 naming the entry's ``gpus``."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 8, "allocated_gpus": 0}).status_code == 200
        body = {**JOB, "gpus": 16, "admit": True, "running": [_low("ghost", 16)]}
        r = a.post(URL, json=body)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "running[0].gpus" and OD in r.json()["detail"], r.text
        assert a.post(URL, json={**body, "admit": False}).status_code == 422  # a recommendation too
        # two entries that together pass the pool's count: the second is named
        assert a.patch(f"/v1/pools/{OD}", json={"allocated_gpus": 8}).status_code == 200
        r = a.post(URL, json={**JOB, "running": [_low("x", 4), _low("y", 8)]})
        assert r.status_code == 422 and r.json()["field"] == "running[1].gpus", r.text
        # work that fits in the pool's count is believed: x's 8 GPUs go to the admission
        got = _ok(a.post(URL, json={**JOB, "admit": True, "running": [_low("x")]}))
        assert (got["action"], got["victims"]) == ("preempt", ["x"]), got
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
        # x is promised now: listed again it is left out of the count (its GPUs are the admission's), so y fits
        got = _ok(a.post(URL, json={**JOB, "running": [_low("x"), _low("y")]}))
        assert (got["action"], got["victims"]) == ("preempt", ["y"]), got
        # running work in a pool the request does not read is checked against that pool's count too
        r = a.post(URL, json={**JOB, "running": [_low("z", 1, "aws/us-east-1/l4/on_demand")]})
        assert r.status_code == 422 and r.json()["field"] == "running[0].gpus", r.text


def test_a_budgeted_admission_that_loses_its_victim_takes_nothing(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: with a budget, an admission's claim runs in the budget's (batched) transaction: it takes the free
    GPUs it counts on (``allocated_gpus``) and then promises its victim; when a concurrent admission promised that
    victim first, the claim answers "taken" and the request decides again, but the GPUs it took stay taken (the batch
    commits the other requests' bookings with them). Six 12-GPU admissions at once in a pool with 8 GPUs free and
    low-priority x on 8: one preempts x (takes 4 free GPUs), the others queue, yet ``allocated_gpus`` grew by 4 for
    each that lost x. Expected: a claim that fails takes nothing (its writes roll back to a savepoint)."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 8}).status_code == 200
        _budget(a)
    body = {**JOB, "gpus": 12, "team": "vision", "expected_run_s": 3600, "admit": True, "running": [_low("x")]}
    out = _race(s, s.token("ml_platform_admin", "ada"), body)
    assert all(g["status"] == 200 for g in out), out
    assert sorted(g["action"] for g in out) == ["preempt"] + ["queue"] * (RACERS - 1), out
    with s.client("ml_platform_admin", "ada") as a:
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 12


def test_a_key_always_answers_the_same(database: Database, make_server: ServerFactory) -> None:
    """Review (holds): an admission that queued under a key booked nothing but records its answer, so a retry under
    the key still answers ``queue`` once room appeared (a new key tries again); a recommendation (no ``admit``)
    books nothing and does not use its key, so the key stays free for the admission."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 8, "allocated_gpus": 8}).status_code == 200
        body = {**JOB, "admit": True}
        assert _ok(a.post(URL, json={**body, "admit": False}, headers=_key("k")))["action"] == "queue"
        queued = _ok(a.post(URL, json=body, headers=_key("k")))
        assert queued["action"] == "queue", queued
        assert a.patch(f"/v1/pools/{OD}", json={"allocated_gpus": 0}).status_code == 200
        assert _ok(a.post(URL, json=body, headers=_key("k"))) == queued
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 0
        placed = _ok(a.post(URL, json=body, headers=_key("k2")))
        assert placed["action"] == "place" and a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
