"""Issue #17 part A, each attack written as a test over HTTP on SQLite and PostgreSQL: the approval bypasses
(price lowered for creation, self-approval, splitting), viewers spending budgets, a reused Idempotency-Key,
absurd sizes, loose types, the seeds' request bodies, and plans that re-buy what is already held."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory

DAY = 86_400
START = "2026-02-01T00:00:00Z"
RESERVED = "aws/us-east-1/h100_80gb/reserved"
PROBLEM = "application/problem+json"


def _res(units: int, term: int = 12, regions: list[str] | None = None) -> dict[str, Any]:
    return {"sku": "h100_80gb", "units": units, "start": START, "term_months": term,
            "regions": regions or ["us-east-1"]}  # fmt: skip


def _approve(c: httpx.Client, rid: str, **extra: Any) -> httpx.Response:
    return c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "AI-2026", **extra})


def _created(c: httpx.Client, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    r = c.post("/v1/reservations", json=body, headers=headers)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_price_lowered_for_creation_does_not_dodge_dual_approval(
    database: Database, make_server: ServerFactory
) -> None:
    """Attack 1: lower the reserved pool's price, create 1000 x H100 x 36 months (~26 $), restore the price and
    approve alone. The requirement is decided at approval from the list price: ~114.6 M$ needs two approvers."""
    s = make_server(database)
    with s.client("ml_platform_admin", "mallory") as mal, s.client("finops_admin", "fred") as fred:
        orig = mal.get(f"/v1/pools/{RESERVED}").json()["price_usd_per_gpu_h"]
        assert mal.patch(f"/v1/pools/{RESERVED}", json={"price_usd_per_gpu_h": "0.000001"}).status_code == 200
        res = _created(mal, _res(1000, 36))
        assert res["est_cost_usd"] < 100  # priced at the lowered pool price
        assert mal.patch(f"/v1/pools/{RESERVED}", json={"price_usd_per_gpu_h": str(orig)}).status_code == 200
        with s.client("finops_admin", "accomplice") as acc:
            alone = _approve(acc, res["reservation_id"])
        assert alone.status_code == 200, alone.text
        assert alone.json()["status"] == "pending_approval" and alone.json()["approvals_required"] == 2
        assert s.services.provider.find(f"gpufleet-{res['reservation_id']}") is None  # type: ignore[attr-defined]
        # a second finops admin is not the second approver; an ml_platform_admin other than the requester is
        assert _approve(fred, res["reservation_id"]).status_code == 409
        with s.client("ml_platform_admin", "paula") as paula:
            done = _approve(paula, res["reservation_id"])
        assert done.status_code == 200 and done.json()["status"] == "submitted_to_cloud"
        events = mal.get("/v1/audit", params={"entity_id": res["reservation_id"]}).json()
        first = next(e for e in events if e["action"] == "reservation.approval_recorded")
        assert float(first["detail"]["valued_usd"]) == pytest.approx(1000 * 36 * 730 * 4.3619)  # list price, not 1e-6


def test_the_requester_never_approves_their_own_reservation(database: Database, make_server: ServerFactory) -> None:
    """Attack 2: the requester approves their own reservation (under the threshold: alone; above it: as one of
    the two). Refused with 403, and above the threshold the two approvers are two other people."""
    s = make_server(database)
    with s.client("finops_admin", "alice") as alice, s.client("ml_platform_admin", "bob") as bob:
        small = _created(alice, _res(1, 1))
        own = _approve(alice, small["reservation_id"])
        assert own.status_code == 403 and own.headers["content-type"] == PROBLEM
        assert "may not approve" in own.json()["detail"]
        big = _created(alice, _res(8, 12))
        assert _approve(alice, big["reservation_id"]).status_code == 403
        after_bob = _approve(bob, big["reservation_id"])
        assert after_bob.status_code == 200 and after_bob.json()["status"] == "pending_approval"
        with s.client("finops_admin", "fiona") as fiona:
            done = _approve(fiona, big["reservation_id"])
        assert done.status_code == 200 and done.json()["status"] == "submitted_to_cloud"
        assert {a["user_id"] for a in done.json()["approvals"]} == {"bob", "fiona"}
        # an approval the requester recorded before this rule (written straight into the store) does not count
        legacy = _created(bob, _res(8, 12))
        with database.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO reservation_approvals VALUES (:r, 'bob', 'ml_platform_admin', 'X', :t)"),
                {"r": legacy["reservation_id"], "t": NOW_S},
            )
        r = _approve(alice, legacy["reservation_id"])
        assert r.status_code == 200 and r.json()["status"] == "pending_approval"


def test_splitting_under_the_threshold_still_needs_two_approvals(
    database: Database, make_server: ServerFactory
) -> None:
    """Attack 3: five reservations just under the 100 k$ threshold (2 H100 x 12 months = 76,420 $), each approved
    by the same one person. The requester's commitments in the 30-day window add up: only the first passes."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    outcomes = []
    with s.client("finops_admin", "sam") as sam, s.client("ml_platform_admin", "bob") as bob:
        for _ in range(5):
            rid = _created(sam, _res(2, 12))["reservation_id"]
            r = _approve(bob, rid)
            assert r.status_code == 200, r.text
            outcomes.append((r.json()["status"], r.json()["approvals_required"]))
        assert outcomes == [("submitted_to_cloud", 1)] + [("pending_approval", 2)] * 4
        # created together first, then approved: each sees the others (no race between two halves)
        # a second past the start of sam's four pending halves: they can no longer be approved (a start equal to now
        # still can, and then they still count: tests/integration/test_review_susp_approval_window.py)
        clock.advance(31 * DAY + 1)
        with s.client("finops_admin", "sue") as sue:
            pair = [_created(sue, {**_res(2, 12), "start": "2026-03-15T00:00:00Z"})["reservation_id"] for _ in "ab"]
            assert [_approve(bob, rid).json()["status"] for rid in pair] == ["pending_approval"] * 2
            # outside the window the first requester's old commitments no longer count
            rid = _created(sam, {**_res(2, 12), "start": "2026-03-15T00:00:00Z"})["reservation_id"]
        assert _approve(bob, rid).json()["status"] == "submitted_to_cloud"


def test_a_viewer_cannot_spend_a_team_budget(database: Database, make_server: ServerFactory) -> None:
    """Attack 4: a read-only viewer sends placement requests naming a team with a budget. A recommendation books
    nothing; booking (``admit``) is for roles that may submit work, and then only for their own team."""
    s = make_server(database)
    with s.client("finops_admin", "alice") as admin:
        assert admin.post("/v1/teams", json={"id": "t-spend", "name": "spend"}).status_code == 201
        assert admin.put("/v1/teams/t-spend/budget", json={"limit_usd": 500}).status_code == 200
    body = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 1, "team": "t-spend",
            "expected_run_s": 3600}  # fmt: skip
    with s.client("viewer", "vic") as vic:
        answers = [vic.post("/v1/placement/recommendations", json=body) for _ in range(25)]
        assert {a.status_code for a in answers} == {200}
        assert vic.get("/v1/teams/t-spend/budget").json()["committed_usd"] == 0  # nothing spent
        assert all(a.json()["budget"]["action"] == "admit" and not a.json()["budget"]["booked"] for a in answers)
        booking = vic.post("/v1/placement/recommendations", json={**body, "admit": True})
        assert booking.status_code == 403
    with s.client("app_team", "other", team="t-spend-no") as stranger:
        assert stranger.post("/v1/placement/recommendations", json={**body, "admit": True}).status_code == 403
    with s.client("app_team", "ann", team="t-spend") as ann:
        booked = ann.post("/v1/placement/recommendations", json={**body, "admit": True}).json()["budget"]
        assert booked["booked"] and booked["action"] == "admit" and booked["committed_usd"] == 0
        assert ann.get("/v1/teams/t-spend/budget").json()["committed_usd"] > 0
    with s.client("finops_admin", "alice") as admin:
        events = admin.get("/v1/audit", params={"entity_id": "t-spend", "action": "budget.admission"}).json()
    assert [e["actor"] for e in events] == ["ann"]


def test_an_idempotency_key_reused_with_another_body_is_refused(database: Database, make_server: ServerFactory) -> None:
    """Attack 14: the same Idempotency-Key with a different body (here: other regions) returned the first one."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as bob:
        pool = {"id": "aws/us-west-2/h100_80gb/reserved", "provider_id": "aws", "region_id": "us-west-2",
                "sku_id": "h100_80gb", "tier": "reserved", "price_usd_per_gpu_h": "4.3619", "term_months": 12}  # fmt: skip
        assert bob.post("/v1/pools", json=pool).status_code == 201
        first = _created(bob, _res(2, 1), **{"Idempotency-Key": "k-1"})
        assert _created(bob, _res(2, 1), **{"Idempotency-Key": "k-1"})["reservation_id"] == first["reservation_id"]
        other = bob.post("/v1/reservations", json=_res(2, 1, ["us-east-1", "us-west-2"]),
                         headers={"Idempotency-Key": "k-1"})  # fmt: skip
        assert other.status_code == 409 and other.headers["content-type"] == PROBLEM
        assert "'k-1'" in other.json()["detail"] and first["reservation_id"] in other.json()["detail"]
        assert len(bob.get("/v1/reservations").json()) == 1


def test_sanity_bounds_on_units_and_estimated_cost(database: Database, make_server: ServerFactory) -> None:
    """Attack 15: 2,147,483,647 units (~246 T$) was accepted. Refused with a 422 naming the field."""
    s = make_server(database)
    with s.client("finops_admin", "alice") as c:
        for units in (2_147_483_647, 100_001):
            r = c.post("/v1/reservations", json=_res(units, 36))
            assert r.status_code == 422 and r.json()["field"] == "units", r.text
        costly = c.post("/v1/reservations", json={**_res(100_000, 36), "sku": "b200"})  # ~23.7 G$ at list price
        assert costly.status_code == 422 and costly.json()["field"] == "units"
        assert "est_cost_usd" in costly.json()["detail"]
        assert c.get("/v1/reservations").json() == []


def test_loose_types_are_refused_naming_the_field(database: Database, make_server: ServerFactory) -> None:
    """Attack 16: "12" for term_months, "yes" for a boolean, an empty degrade option, a token for a team that
    does not exist, ingest rows that bill one team's workload to another team."""
    s = make_server(database)
    place = {"job_class": "training", "priority": "high", "sku": "h100_80gb"}
    with s.client("ml_platform_admin", "bob") as bob:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("/v1/reservations", {**_res(1, 1), "term_months": "12"}, "term_months"),
            ("/v1/reservations", {**_res(1, 1), "units": "8"}, "units"),
            ("/v1/placement/recommendations", {**place, "checkpointable": "yes"}, "checkpointable"),
            ("/v1/placement/recommendations", {**place, "degrade_options": [{}]}, "degrade_options[0]"),
            ("/v1/placement/recommendations", {**place, "expected_run_s": "3600"}, "expected_run_s"),
            ("/v1/placement/signals", {"pool": RESERVED, "stockout": "yes"}, "stockout"),
            ("/v1/plans:propose", {"sku": "h100_80gb", "region": "us-east-1", "within_days": "7"}, "within_days"),
        ]
        for path, body, field in cases:
            r = bob.post(path, json=body) if "signals" not in path else bob.put(path, json=body)
            assert r.status_code == 422 and r.json()["field"] == field, (path, body, r.text)
        assert bob.put("/v1/teams/t-a/budget", json={"limit_usd": 5, "enforce": "yes"}).status_code in (404, 422)
        for team in ("t-a", "t-b"):
            assert bob.post("/v1/teams", json={"id": team, "name": team}).status_code == 201
        assert bob.post("/v1/tenants", json={"id": "t-a-prod", "name": "prod", "team_id": "t-a"}).status_code == 201
        r = bob.put("/v1/teams/t-a/budget", json={"limit_usd": 5, "enforce": "yes"})
        assert r.status_code == 422 and r.json()["field"] == "enforce"
        wl = bob.post("/v1/workloads", json={"name": "a", "image": "img:1", "gpu_sku": "h100_80gb", "team": "t-a"})
        assert wl.status_code == 201, wl.text
        wid = wl.json()["workload_id"]
        rec = {"source": "dcgm", "bucket_start_s": NOW_S - 3600, "bucket_s": 3600, "workload_id": wid,
               "team_id": "t-b", "sku_id": "h100_80gb", "gpus_allocated": 8.0, "gpu_util": 0.5}  # fmt: skip
        r = bob.post("/v1/utilization:ingest", json={"records": [{**rec, "team_id": "t-a"}, rec]})
        assert r.status_code == 422 and r.json()["field"] == "records[1].team_id", r.text
        # an unregistered workload keeps the team its first records named
        first = {**rec, "workload_id": "wl-ext", "team_id": "t-a"}
        assert bob.post("/v1/utilization:ingest", json={"records": [first]}).status_code == 200
        moved = bob.post("/v1/utilization:ingest", json={"records": [{**first, "team_id": "t-b",
                                                                      "bucket_start_s": NOW_S - 7200}]})  # fmt: skip
        assert moved.status_code == 422 and moved.json()["field"] == "records[0].team_id"
        csv = "source,bucket_start_s,bucket_s,workload_id,team_id,sku_id,gpus_allocated,gpu_util\n"
        csv += f"dcgm,{NOW_S - 7200},3600,{wid},t-b,h100_80gb,1,0.5\n"
        r = bob.post("/v1/utilization:ingest", content=csv, headers={"Content-Type": "text/csv"})
        assert r.status_code == 422 and r.json()["field"] == "records[0].team_id", r.text
    with s.client("app_team", "ghost", team="no-such-team") as ghost:
        r = ghost.get("/v1/workloads")
        assert r.status_code == 403 and "no-such-team" in r.json()["detail"]


def _reserved_pool(c: httpx.Client, region: str) -> None:
    pool = {"id": f"aws/{region}/h100_80gb/reserved", "provider_id": "aws", "region_id": region,
            "sku_id": "h100_80gb", "tier": "reserved", "price_usd_per_gpu_h": "4.3619", "term_months": 12}  # fmt: skip
    assert c.post("/v1/pools", json=pool).status_code == 201


def test_the_seeds_request_bodies_work_as_written(database: Database, make_server: ServerFactory) -> None:
    """Attack 17: the design's own bodies got 422s, a multi-region reservation put every unit in the first
    region, and idle_pct came back as a percentage."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as bob, s.client("finops_admin", "alice") as alice:
        rec = bob.post("/v1/placement/recommendations", json={"job_class": "training", "priority": "high"})
        assert rec.status_code == 200, rec.text
        assert {"region", "pool", "reason", "fallback"} <= rec.json().keys()
        assert bob.post("/v1/teams", json={"id": "search", "name": "Search"}).status_code == 201
        assert (
            bob.post("/v1/tenants", json={"id": "search-prod", "name": "prod", "team_id": "search"}).status_code == 201
        )
        seed = {"name": "llm-serve", "image": "registry.example.com/llm-serve:1.4", "cpu": 8, "mem_gb": 64,
                "gpus": 1, "gpu_sku": "H100", "min_replicas": 2, "max_replicas": 20, "scale_metric": "gpu-util",
                "budget_usd_day": 2000, "team": "search", "tenant": "search-prod", "priority": "high"}  # fmt: skip
        made = bob.post("/v1/workloads", json=seed)
        assert made.status_code == 201, made.text
        wid = made.json()["workload_id"]
        assert wid.startswith("wl_") and bob.get(f"/v1/workloads/{wid}").json()["gpu_sku"] == "h100_80gb"
        _reserved_pool(bob, "us-west-2")
        res = _created(alice, _res(9, 1, ["us-east-1", "us-west-2"]))
        assert res["units"] == 9 and res["status"] == "pending_approval"
        assert res["regions"] == [{"region": "us-east-1", "units": 5}, {"region": "us-west-2", "units": 4}]
        approved = _approve(bob, res["reservation_id"], approver_ids=["bob", "carol"])
        assert approved.status_code == 200, approved.text
        assert approved.json()["status"] == "submitted_to_cloud"
        orders = {o.region_id: o.units for o in s.services.provider.orders()}  # type: ignore[attr-defined]
        assert orders == {"us-east-1": 5, "us-west-2": 4}
        spoof = _approve(bob, _created(alice, _res(1, 1))["reservation_id"], approver_ids=["carol", "dave"])
        assert spoof.status_code == 422 and spoof.json()["field"] == "approver_ids"
        rows = [{"source": "dcgm", "bucket_start_s": NOW_S - (h + 1) * 3600, "bucket_s": 3600, "workload_id": wid,
                 "team_id": "search", "sku_id": "h100_80gb", "gpus_allocated": 2.0, "gpu_util": 0.25}
                for h in range(4)]  # fmt: skip
        assert bob.post("/v1/utilization:ingest", json={"records": rows}).status_code == 200
        cost = bob.get(f"/v1/workloads/{wid}/cost", params={"window": "1d"}).json()
        assert cost["idle_pct"] == 0.75


def _hourly(days: int, gpus: float, workload: str) -> list[dict[str, Any]]:
    start = NOW_S - days * DAY
    return [{"source": "dcgm", "bucket_start_s": start + h * 3600, "bucket_s": 3600, "workload_id": workload,
             "team_id": "team-p", "sku_id": "h100_80gb", "gpus_allocated": gpus, "gpu_util": 0.6}
            for h in range(days * 24)]  # fmt: skip


def test_plans_propose_counts_reservations_held_or_pending(database: Database, make_server: ServerFactory) -> None:
    """Attack 18: after a plan's orders are pending, a small shift in demand planned again bought the whole
    capacity a second time. Held and pending reservations are counted first: only the shift is proposed."""
    s = make_server(database)
    body = {"sku": "h100_80gb", "region": "us-east-1"}
    with s.client("ml_platform_admin", "bob") as bob:
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 24.0, "wl-a")}).status_code == 200
        first = bob.post("/v1/plans:propose", json=body).json()
        bought = sum(r["units"] for r in first["created"])
        assert bought >= 16, first
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 1.0, "wl-b")}).status_code == 200
        second = bob.post("/v1/plans:propose", json=body).json()
        again = sum(r["units"] for r in second["created"])
        assert again <= 8, second["created"]  # at most a node's worth for one more GPU of demand, not a re-buy
        assert {h["reservation_id"] for h in second["held"]} >= {r["reservation_id"] for r in first["created"]}
        assert second["context"]["committed_gpus_at_lead"] >= bought  # what is pending counts as committed
        assert len(bob.get("/v1/reservations").json()) == len(first["created"]) + len(second["created"])
