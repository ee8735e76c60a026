"""Review (placement, session place3) over HTTP on SQLite and PostgreSQL: releasing an admission
(``DELETE /v1/placement/admissions/{key}``) frees what it booked at once: its GPUs in the pool, its promised victims,
its budget commitment."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import httpx

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

URL = "/v1/placement/recommendations"
OD = "aws/us-east-1/h100_80gb/on_demand"
JOB = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"]}
HOUR = 3600


def _low(workload_id: str, gpus: int = 8) -> dict[str, Any]:
    return {"workload_id": workload_id, "pool": OD, "gpus": gpus, "priority": "low"}


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _key(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def _allocated(c: httpx.Client) -> int:
    n: int = c.get(f"/v1/pools/{OD}").json()["allocated_gpus"]
    return n


def _released(c: httpx.Client) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = c.get("/v1/audit", params={"action": "placement.released"}).json()
    return out


def test_a_released_admission_frees_its_gpus_victims_and_budget(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: an admission's booking ends only with time: its victims stay promised for
    ``placement_preemption_hold_s`` (1 h), its GPUs stay taken in the pool's ``allocated_gpus`` until an admin sets the
    count, and its budget commitment runs to its expected end, although the caller knows the preemption was abandoned
    (or the job finished). Expected: ``DELETE /v1/placement/admissions/{Idempotency-Key}`` by the caller who admitted
    it frees them at once (the GPUs it took back to the pool, its victims preemptible again, its committed spend
    ended now), audited (``placement.released``); a second release answers the same and frees nothing again; a
    retry of the admission under the key still answers what was booked and books nothing."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 8}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "100000"}).status_code == 200
        body = {**JOB, "gpus": 12, "team": "vision", "expected_run_s": 4 * HOUR, "admit": True, "running": [_low("x")]}
        first = _ok(a.post(URL, json=body, headers=_key("train-1")))
        assert (first["action"], first["victims"], first["budget"]["booked"]) == ("preempt", ["x"], True), first
        assert _allocated(a) == 12  # 4 free GPUs taken, x's 8 pass to the admission
        assert Decimal(str(a.get("/v1/teams/vision/budget").json()["committed_usd"])) > 0
        look = {**JOB, "gpus": 12, "running": [_low("x")]}
        assert _ok(a.post(URL, json=look))["action"] == "queue"  # x is promised: it frees nothing for another
        r = a.delete("/v1/placement/admissions/train-1")
        got = _ok(r)
        assert got["idempotency_key"] == "train-1" and got["pool"] == OD, got
        assert (got["gpus_returned"], got["victims_released"], got["budget_commitment_ended"]) == (4, ["x"], True)
        assert got["released_at_s"] == NOW_S
        assert _allocated(a) == 8
        assert Decimal(str(a.get("/v1/teams/vision/budget").json()["committed_usd"])) == 0
        assert _ok(a.post(URL, json=look))["victims"] == ["x"]  # x can be preempted again
        [audit] = _released(a)
        assert audit["entity_id"] == OD and audit["actor"] == "ada", audit
        # a second release: the same answer, nothing freed again
        assert _ok(a.delete("/v1/placement/admissions/train-1")) == got
        assert _allocated(a) == 8 and len(_released(a)) == 1
        # the key still answers what was booked (nothing booked again)
        assert _ok(a.post(URL, json=body, headers=_key("train-1"))) == first
        assert _allocated(a) == 8
        # a wrong key, a malformed key
        assert a.delete("/v1/placement/admissions/nope").status_code == 404
        r = a.delete("/v1/placement/admissions/bad%20key!")
        assert r.status_code == 422, r.text


def test_only_the_caller_who_admitted_may_release(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed): an admission is released by the caller who made it (its key is the caller's): a viewer is a
    403, another admin or another team's token a 404 (as for any other key of theirs), and an app_team token
    releases its own admission."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": None, "allocated_gpus": 0}).status_code == 200
        for team in ("vision", "search"):
            assert a.post("/v1/teams", json={"id": team, "name": team}).status_code == 201
    with s.client("app_team", "tess", team="vision") as t:
        placed = _ok(t.post(URL, json={**JOB, "admit": True}, headers=_key("k")))
        assert placed["action"] == "place", placed
    with s.client("viewer", "vic") as v:
        assert v.delete("/v1/placement/admissions/k").status_code == 403
    with s.client("ml_platform_admin", "bob") as b:
        assert b.delete("/v1/placement/admissions/k").status_code == 404
    with s.client("app_team", "sam", team="search") as other:
        assert other.delete("/v1/placement/admissions/k").status_code == 404
    with s.client("ml_platform_admin", "ada") as a:
        assert _allocated(a) == 8 and _released(a) == []
    with s.client("app_team", "tess", team="vision") as t:
        got = _ok(t.delete("/v1/placement/admissions/k"))
        assert (got["gpus_returned"], got["victims_released"], got["budget_commitment_ended"]) == (8, [], False)
        assert _allocated(t) == 0


def test_a_release_after_the_hold_and_after_the_keys_retention(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed): released after its victims' hold ended, an admission still gives back the GPUs it took (they
    stay in ``allocated_gpus`` otherwise) and releases no victim (the promise ended already); a queued admission
    books nothing and its release frees nothing; once its key is pruned (its retention), the admission is unknown:
    404."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 8}).status_code == 200
        got = _ok(a.post(URL, json={**JOB, "gpus": 12, "admit": True, "running": [_low("x")]}, headers=_key("p")))
        assert (got["action"], got["victims"]) == ("preempt", ["x"]), got
        queued = _ok(a.post(URL, json={**JOB, "gpus": 16, "admit": True}, headers=_key("q")))
        assert queued["action"] == "queue", queued
        clock.advance(2 * HOUR)  # x's promise ended (1 h)
        rel = _ok(a.delete("/v1/placement/admissions/p"))
        assert (rel["gpus_returned"], rel["victims_released"]) == (4, []), rel
        assert rel["released_at_s"] == NOW_S + 2 * HOUR and _allocated(a) == 8
        rel = _ok(a.delete("/v1/placement/admissions/q"))
        assert (rel["pool"], rel["gpus_returned"], rel["victims_released"]) == (None, 0, []), rel
        assert _allocated(a) == 8
        clock.advance(25 * HOUR)  # past the keys' retention: the next keyed admission prunes them
        _ok(a.post(URL, json={**JOB, "admit": True}, headers=_key("r")))
        assert a.delete("/v1/placement/admissions/p").status_code == 404


def test_concurrent_releases_free_once(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed): six releases of one admission at once free its GPUs once; each answers the same."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": None, "allocated_gpus": 8}).status_code == 200
        _ok(a.post(URL, json={**JOB, "admit": True}, headers=_key("k")))
        assert _allocated(a) == 16
    out = _race_release(s, s.token("ml_platform_admin", "ada"), "k")
    assert all(o == out[0] for o in out) and out[0]["gpus_returned"] == 8, out
    with s.client("ml_platform_admin", "ada") as a:
        assert _allocated(a) == 8 and len(_released(a)) == 1


def _race_release(s: LiveServer, token: str, key: str, racers: int = 6) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    gate = threading.Barrier(racers)

    def one() -> None:
        with httpx.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            gate.wait()
            r = c.delete(f"/v1/placement/admissions/{key}")
            out.append({"status": r.status_code, **(r.json() if r.status_code == 200 else {"text": r.text})})

    threads = [threading.Thread(target=one) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_a_long_admission_can_be_released_while_its_budget_commitment_runs(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect (release against the keys' retention): a key is pruned 24 h after its admission,
    and with it the only handle on the admission: a training run admitted for 3 days that finishes on day 2 could not
    be released, so its budget commitment kept the team's money committed for a day more (later admissions queued
    over budget). Expected: a key whose admission's budget commitment still runs, unreleased, is kept until the
    commitment ends; released (or without one), it is pruned after the retention as before."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": None, "allocated_gpus": 0}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "1000000"}).status_code == 200
        long_run = {**JOB, "team": "vision", "expected_run_s": 3 * 24 * HOUR, "admit": True}
        got = _ok(a.post(URL, json=long_run, headers=_key("long")))
        assert got["budget"]["booked"] is True, got
        _ok(a.post(URL, json={**JOB, "admit": True}, headers=_key("short")))  # no budget commitment
        clock.advance(2 * 24 * HOUR)
        _ok(a.post(URL, json={**JOB, "admit": True}, headers=_key("pruner")))  # prunes the keys past retention
        assert a.delete("/v1/placement/admissions/short").status_code == 404
        rel = _ok(a.delete("/v1/placement/admissions/long"))
        assert rel["budget_commitment_ended"] is True and rel["gpus_returned"] == 8, rel
        assert Decimal(str(a.get("/v1/teams/vision/budget").json()["committed_usd"])) == 0
        clock.advance(2 * HOUR)
        _ok(a.post(URL, json={**JOB, "admit": True}, headers=_key("pruner-2")))  # released: pruned now
        assert a.delete("/v1/placement/admissions/long").status_code == 404


def test_admissions_and_releases_at_once_leave_the_count_as_it_was(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (holds): six callers at once each admit (with a budget; 9 GPUs free for 10 each, so each preempts its
    own low-priority job taking 2 free GPUs, or queues once they are taken) and release right away, twice: every
    request answers 200 (no deadlock between a booking's locks and a release's), each release gives back what its
    admission took, and the pool's count, the promises and the team's commitments end as they began."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 57, "allocated_gpus": 48}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "1000000"}).status_code == 200
    errors: list[str] = []
    actions: list[str] = []
    gate = threading.Barrier(6)

    def one(i: int) -> None:
        token = s.token("ml_platform_admin", f"user{i}")
        with httpx.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            gate.wait()
            for round_ in range(2):
                body = {**JOB, "gpus": 10, "team": "vision", "expected_run_s": HOUR, "admit": True,
                        "running": [_low(f"low{i}")]}  # fmt: skip
                r = c.post(URL, json=body, headers=_key(f"k{round_}"))
                if r.status_code != 200 or r.json()["action"] not in ("preempt", "queue"):
                    errors.append(f"admit {i}/{round_}: {r.status_code} {r.text}")
                    continue
                actions.append(r.json()["action"])
                took = 2 if r.json()["action"] == "preempt" else 0
                r = c.delete(f"/v1/placement/admissions/k{round_}")
                if r.status_code != 200 or r.json()["gpus_returned"] != took:
                    errors.append(f"release {i}/{round_}: {r.status_code} {r.text}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and actions.count("preempt") >= 4, (errors, actions)
    with s.client("ml_platform_admin", "ada") as a:
        assert _allocated(a) == 48 and len(_released(a)) == 12
        assert Decimal(str(a.get("/v1/teams/vision/budget").json()["committed_usd"])) == 0
        got = _ok(a.post(URL, json={**JOB, "gpus": 10, "running": [_low("low0")]}))
        assert got["victims"] == ["low0"], got  # no promise left
