"""Review (placement2, session 46) over HTTP on SQLite and PostgreSQL: what ``POST /v1/placement/recommendations``
promises a victim's GPUs for, what its ``skipped`` says, and what it says of a deadline it cannot meet."""

from __future__ import annotations

from typing import Any

import httpx

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory
from tests.integration.test_review_placement2_http import RACERS, _race

URL = "/v1/placement/recommendations"
OD = "aws/us-east-1/h100_80gb/on_demand"
JOB = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"]}


def _low(workload_id: str, gpus: int = 8, pool: str = OD) -> dict[str, Any]:
    return {"workload_id": workload_id, "pool": pool, "gpus": gpus, "priority": "low"}


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_victims_gpus_are_promised_to_one_admission(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: two admissions are told to preempt the same victim: the pool is full, low-priority
    job X runs on its 8 GPUs, and two high-priority admissions each listing X are both answered ``preempt [X]``, each
    counting X's GPUs as theirs (the service keeps no record of what an earlier answer promised). Expected: an
    admitted preemption promises its victims to itself for ``placement_preemption_hold_s``; meanwhile no other
    answer counts them; after it, work still listed can be preempted again."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock, placement_preemption_hold_s=600)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 8, "allocated_gpus": 8}).status_code == 200
        first = _ok(a.post(URL, json={**JOB, "admit": True, "running": [_low("x")]}))
        assert (first["action"], first["victims"]) == ("preempt", ["x"]), first
        second = _ok(a.post(URL, json={**JOB, "admit": True, "running": [_low("x")]}))
        assert second["action"] == "queue" and second["victims"] == [], second
        # a recommendation does not count them either; another victim still can be taken
        preview = _ok(a.post(URL, json={**JOB, "running": [_low("x"), _low("y")]}))
        assert (preview["action"], preview["victims"]) == ("preempt", ["y"]), preview
        # the free GPUs a preemption counts on are taken with it: 4 free + y's 4 for 8, and nobody else gets the 4
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 12}).status_code == 200
        got = _ok(a.post(URL, json={**JOB, "admit": True, "running": [_low("x"), _low("y", 4)]}))
        assert (got["action"], got["victims"]) == ("preempt", ["y"]), got
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 12
        small = _ok(a.post(URL, json={**JOB, "gpus": 4, "admit": True}))
        assert small["action"] == "queue", small
        audit = a.get("/v1/audit", params={"action": "placement.admitted"}).json()
        assert sorted(tuple(e["detail"]["victims"]) for e in audit) == [("x",), ("y",)], audit
        clock.advance(601)  # the promises lapsed (the preemptions did not happen): x is a candidate again
        again = _ok(a.post(URL, json={**JOB, "admit": True, "running": [_low("x")]}))
        assert (again["action"], again["victims"]) == ("preempt", ["x"]), again


def test_a_preempting_admission_with_a_budget_is_admitted(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: with a budget, an admission whose placement preempts claims all its GPUs in the
    full pool it preempts in (allocated_gpus + 8 > quota): the claim fails every time and the answer is 409
    "retry", although the recommendation says preempt and the budget admits it. Expected: admitted and booked, the
    victim's GPUs passing to it (allocated_gpus unchanged), the victim promised to it."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 8, "allocated_gpus": 8}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "100000"}).status_code == 200
        body = {**JOB, "team": "vision", "expected_run_s": 3600, "running": [_low("x")]}
        assert _ok(a.post(URL, json=body))["action"] == "preempt"
        got = _ok(a.post(URL, json={**body, "admit": True}))
        assert (got["action"], got["victims"], got["budget"]["booked"]) == ("preempt", ["x"], True), got
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8  # x's GPUs go to the admission
        assert _ok(a.post(URL, json=body))["action"] == "queue"  # x is promised: nothing else to preempt


def test_running_work_listed_twice_is_a_422(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the same running workload listed twice in one pool is counted twice: 4 GPUs of job Y "free" 8, and the
    answer is ``preempt ["y", "y"]``. Expected: 422 naming ``running[1].workload_id``."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 8, "allocated_gpus": 8}).status_code == 200
        r = a.post(URL, json={**JOB, "running": [_low("y", 4), _low("y", 4)]})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "running[1].workload_id" and "y" in r.json()["detail"]


def test_skipped_names_every_option_tried(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: a degrade option that was tried and found no pool leaves no trace: a serving replica needing 600 GB that
    declares a degrade onto L4 (8 x 24 GB) queues, and ``skipped`` lists only the H100 pools: nothing says the L4
    option was tried and refused for its memory; over budget, nothing in ``skipped`` says the requested pool was passed
    over for the budget. Expected: each step names the option it was tried for (``option``), the options that found
    nothing included, and a placement over budget is a step with trigger ``over_budget``."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 0}).status_code == 200
        job = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"],
               "replica_gpu_memory_gb": 600, "degrade_options": [{"sku": "l4"}, {"gpus": 4}]}  # fmt: skip
        d = _ok(a.post(URL, json=job))
        assert d["action"] == "queue", d
        steps = {(x["pool"], x["option"]): x["trigger"] for x in d["skipped"]}
        assert steps[(OD, None)] == "quota_headroom"
        assert steps[("aws/us-east-1/l4/on_demand", "degrade_options[0]")] == "gpu_memory"
        assert steps[(OD, "degrade_options[1]")] == "gpu_memory"
        # over budget: the requested pool is passed over for the budget, and the step says so
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": None}).status_code == 200
        assert a.post("/v1/teams", json={"id": "vision", "name": "Vision"}).status_code == 201
        assert a.put("/v1/teams/vision/budget", json={"limit_usd": "500"}).status_code == 200
        job = {**JOB, "team": "vision", "expected_run_s": 86400, "degrade_options": [{"gpus": 2}]}
        d = _ok(a.post(URL, json=job))
        assert (d["action"], d["reason"], d["pool"], d["gpus"]) == ("degrade", "over_budget_degraded", OD, 2), d
        reserved = "aws/us-east-1/h100_80gb/reserved"
        assert [(x["pool"], x["trigger"], x["option"]) for x in d["skipped"]] == [
            (reserved, "quota_headroom", None),
            (OD, "over_budget", None),
            (reserved, "quota_headroom", "degrade_options[0]"),
        ], d["skipped"]


def test_a_placement_that_cannot_meet_its_deadline_says_so(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: a job whose deadline has passed (or whose run cannot end by it even if it starts now) is answered
    ``placed_on_demand`` like any other: nothing tells the caller it will be late. Expected: it is still placed (now is
    the soonest it can start) with a reason ending in ``_deadline_missed``, like ``queued_deadline_missed``."""
    s = make_server(database, clock=FixedClock(NOW_S))
    with s.client("ml_platform_admin", "ada") as a:
        fits = _ok(a.post(URL, json={**JOB, "deadline_s": NOW_S + 7200, "expected_run_s": 3600}))
        assert fits["reason"] == "placed_on_demand", fits
        for deadline in (NOW_S - 1, NOW_S + 1800):
            late = _ok(a.post(URL, json={**JOB, "deadline_s": deadline, "expected_run_s": 3600}))
            assert (late["action"], late["pool"]) == ("place", OD), late
            assert late["reason"] == "placed_on_demand_deadline_missed", late


def test_concurrent_admissions_promise_a_victim_once(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect (concurrent form of the promised victim above): six admissions at once, each
    listing low-priority x in the full pool: each was answered ``preempt [x]``. Expected: exactly one is, the others
    (no other victim) queue; the pool's count is unchanged (x's GPUs pass to the one admitted)."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 8, "allocated_gpus": 8}).status_code == 200
    got = _race(s, s.token("ml_platform_admin", "ada"), {**JOB, "admit": True, "running": [_low("x")]})
    assert all(g["status"] == 200 for g in got), got
    assert sorted(g["action"] for g in got) == ["preempt"] + ["queue"] * (RACERS - 1), got
    with s.client("ml_platform_admin", "ada") as a:
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
