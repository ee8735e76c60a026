"""The planned-run calendar over HTTP (``/v1/planned-runs``) against a live server on SQLite and on PostgreSQL:
roles, refusals naming the field, idempotent cancel, and the procurer reserving ahead of a registered run that
the pay-per-use tiers cannot carry (``POST /v1/plans:propose`` and the reconciler's pass), and not once the run
is cancelled."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.control.loop import ControlLoop
from gpufleet.control.planned_runs import REASON
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

DAY = 86_400
SKU = "h100_80gb"
REGION = "us-east-1"
OD = f"aws/{REGION}/{SKU}/on_demand"
RESERVED = f"aws/{REGION}/{SKU}/reserved"
PROBLEM = "application/problem+json"


def _run(**change: Any) -> dict[str, Any]:
    return {
        "name": "pretrain-70b", "team": "team-p", "sku": SKU, "region": REGION, "gpus": 64,
        "start_s": NOW_S + 15 * DAY + DAY // 2, "duration_s": 14 * DAY, "probability": 1.0, **change,
    }  # fmt: skip


def _teams(server: LiveServer) -> None:
    with server.client("ml_platform_admin", "bob") as c:
        for team in ("team-p", "team-q"):
            assert c.post("/v1/teams", json={"id": team, "name": team}).status_code in (201, 409)


def _problem(r: httpx.Response, status: int, field: str | None = None) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    if field is not None:
        assert r.json()["field"] == field, r.json()


def test_roles_over_http(database: Database, make_server: ServerFactory) -> None:
    """A viewer cannot register or cancel; a team member registers and cancels for its own team only and reads
    only its own team's runs; admins act for any team; viewers read every run."""
    s = make_server(database)
    _teams(s)
    with (
        s.client("app_team", "ann", "team-p") as ann,
        s.client("viewer", "vic") as vic,
        s.client("finops_admin", "fay") as fay,
        s.client("ml_platform_admin", "bob") as bob,
    ):
        _problem(vic.post("/v1/planned-runs", json=_run()), 403)
        _problem(ann.post("/v1/planned-runs", json=_run(team="team-q")), 403)
        assert vic.get("/v1/planned-runs").json() == []  # the refused requests stored nothing
        own = ann.post("/v1/planned-runs", json=_run())
        assert own.status_code == 201, own.text
        mine = own.json()
        assert mine["registered_s"] == NOW_S and mine["created_by"] == "ann" and mine["status"] == "scheduled"
        other = fay.post("/v1/planned-runs", json=_run(team="team-q")).json()
        assert bob.post("/v1/planned-runs", json=_run(team="team-q", name="b")).status_code == 201
        assert [r["id"] for r in ann.get("/v1/planned-runs").json()] == [mine["id"]]
        _problem(ann.get("/v1/planned-runs", params={"team": "team-q"}), 403)
        _problem(ann.get(f"/v1/planned-runs/{other['id']}"), 404)
        _problem(ann.delete(f"/v1/planned-runs/{other['id']}"), 404)
        _problem(vic.delete(f"/v1/planned-runs/{mine['id']}"), 403)
        assert vic.get(f"/v1/planned-runs/{other['id']}").json()["active"] is True  # nothing was cancelled
        assert len(vic.get("/v1/planned-runs").json()) == 3
        assert len(vic.get("/v1/planned-runs", params={"team": "team-q"}).json()) == 2
        _problem(vic.get("/v1/planned-runs/run_nope"), 404)
        _problem(bob.delete("/v1/planned-runs/run_nope"), 404)
        with s.client() as anonymous:
            _problem(anonymous.get("/v1/planned-runs"), 401)


def test_cancel_twice_is_idempotent_and_audited_once(database: Database, make_server: ServerFactory) -> None:
    s = make_server(database)
    _teams(s)
    with s.client("app_team", "ann", "team-p") as ann, s.client("ml_platform_admin", "bob") as bob:
        run = ann.post("/v1/planned-runs", json=_run()).json()
        first = ann.delete(f"/v1/planned-runs/{run['id']}")
        assert first.status_code == 200 and first.json()["status"] == "cancelled"
        assert first.json()["cancelled_by"] == "ann" and first.json()["active"] is False
        second = bob.delete(f"/v1/planned-runs/{run['id']}")
        assert second.status_code == 200 and second.json() == first.json()
        events = bob.get("/v1/audit", params={"entity_id": run["id"]}).json()
        assert [e["action"] for e in events] == ["planned_run.registered", "planned_run.cancelled"]
        assert bob.get("/v1/planned-runs", params={"active": "true"}).json() == []
        assert [r["id"] for r in bob.get("/v1/planned-runs", params={"active": "false"}).json()] == [run["id"]]
        assert ann.post("/v1/planned-runs", json=_run()).status_code == 201  # the name is free again
        _problem(ann.post("/v1/planned-runs", json=_run(gpus=8)), 422, "name")  # but not twice among active runs


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": -1}, "gpus"),
        ({"gpus": "64"}, "gpus"),
        ({"gpus": 2.5}, "gpus"),
        ({"duration_s": 0}, "duration_s"),
        ({"probability": 0}, "probability"),
        ({"probability": 1.01}, "probability"),
        ({"probability": "0.5"}, "probability"),
        ({"start_s": NOW_S}, "start_s"),
        ({"start_s": NOW_S - DAY}, "start_s"),
        ({"start_s": -1}, "start_s"),
        ({"name": ""}, "name"),
        ({"team": "nobody"}, "team"),
        ({"team": "bad team"}, "team"),
        ({"sku": "zz9"}, "sku"),
        ({"region": "mars-1"}, "region"),
        ({"region": "eu-north1"}, "region"),
        ({"gpu_count": 8}, "gpu_count"),
        ({"sku": None}, "sku"),
    ],
)
def test_a_bad_field_is_a_problem_naming_it(shared_server: LiveServer, change: dict[str, Any], field: str) -> None:
    _teams(shared_server)
    body = {k: v for k, v in _run(**change).items() if v is not None}
    with shared_server.client("ml_platform_admin", "bob") as c:
        r = c.post("/v1/planned-runs", json=body)
        _problem(r, 422, field)
        assert c.get("/v1/planned-runs").json() == []


def _hourly(days: int, gpus: float) -> list[dict[str, Any]]:
    return [
        {"source": "dcgm", "bucket_start_s": NOW_S - days * DAY + h * 3600, "bucket_s": 3600, "workload_id": "wl-base",
         "team_id": "team-p", "sku_id": SKU, "gpus_allocated": gpus, "gpu_util": 0.6, "pool_id": RESERVED}
        for h in range(days * 24)
    ]  # fmt: skip


def test_the_procurer_reserves_ahead_of_a_registered_run_and_not_of_a_cancelled_one(
    database: Database, make_server: ServerFactory
) -> None:
    """8 GPUs in use for 28 days; the on-demand quota is 16 GPUs and no spot or secondary capacity is promised, so
    a 64-GPU run starting after the reserved pool's 14-day lead time cannot be carried by the pay-per-use tiers.

    1. The run registered, then cancelled before the pass: plans:propose reads no planned run and buys only what
       the forecast-led rule does (no ``planned_run_reserve`` order).
    2. Registered again: the reconciler's pass (what the service runs daily) asks the same procurer, which now
       reserves ahead of the run: a pending reservation whose reason is ``planned_run_reserve``, exactly the
       proposal the loop's procurer makes on the context with the registration (as the simulator passes it)."""
    s = make_server(database)
    _teams(s)
    with (
        s.client("ml_platform_admin", "bob") as bob,
        s.client("finops_admin", "fay") as fay,
        s.client("app_team", "ann", "team-p") as ann,
        s.client("viewer", "vic") as vic,
    ):
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 8.0)}).status_code == 200
        assert bob.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16}).status_code == 200
        first = ann.post("/v1/planned-runs", json=_run()).json()
        assert ann.delete(f"/v1/planned-runs/{first['id']}").status_code == 200
        plan = fay.post("/v1/plans:propose", json={"sku": SKU, "region": REGION})
        assert plan.status_code == 200, plan.text
        body = plan.json()
        assert body["context"]["planned_runs"] == 0 and body["planned_runs"] == []
        assert not any(p["reason"].startswith(REASON) for p in body["proposals"])
        assert not any(c["reason"].startswith(REASON) for c in body["created"])
        base = {r["reservation_id"] for r in vic.get("/v1/reservations").json()}

        run = ann.post("/v1/planned-runs", json=_run()).json()
        procurement = s.services.procurement
        loop = ControlLoop.gpufleet(0, tier_limits=procurement.tier_limits([SKU]))
        assert loop.procurer.limits[SKU].on_demand_quota_gpus == 16.0  # type: ignore[attr-defined]
        ctx, _held = procurement.context(SKU, REGION, loop, forecast_h=7 * 24)
        assert [r.name for r in ctx.planned_runs] == ["pretrain-70b"] and ctx.planned_runs[0].gpus == 64
        expected = [p for p in loop.procurer.propose(ctx) if p.reason.startswith(REASON)]
        assert len(expected) == 1 and expected[0].units > 0, expected

        (entry,) = s.services.reconciler.run_once().proposals
        assert entry["region"] == REGION and entry["context"]["planned_runs"] == 1
        reserve = [p for p in entry["proposed"] if p["reason"].startswith(REASON)]
        assert [(p["units"], p["start_s"], p["term_months"], p["reason"]) for p in reserve] == [
            (p.units, p.start_s, p.term_months, p.reason) for p in expected
        ]
        made = [r for r in vic.get("/v1/reservations").json() if r["reservation_id"] not in base]
        assert [(r["units"], r["status"], r["pool"]) for r in made] == [
            (expected[0].units, "pending_approval", RESERVED)
        ]
        rid = made[0]["reservation_id"]
        assert rid in entry["created"]
        events = bob.get("/v1/audit", params={"entity_id": rid, "action": "reservation.proposed_by_loop"}).json()
        assert [e["detail"]["reason"] for e in events] == [expected[0].reason]
        assert events[0]["detail"]["planned_runs"] == [run["id"]] and events[0]["actor"] == "reconciler"
        # the team sees what was bought ahead of its run, as it stands now, and still sees it once cancelled
        bought = [{"reservation_id": rid, "units": expected[0].units, "start_s": made[0]["start_s"],
                   "status": "pending_approval"}]  # fmt: skip
        assert ann.get(f"/v1/planned-runs/{run['id']}").json()["reserved_ahead"] == bought
        assert [r["reserved_ahead"] for r in ann.get("/v1/planned-runs").json() if r["id"] == run["id"]] == [bought]
        assert ann.get(f"/v1/planned-runs/{first['id']}").json()["reserved_ahead"] == []  # cancelled before the pass

        # the next pass (same day: same context) buys nothing twice: the pending order is held
        again = fay.post("/v1/plans:propose", json={"sku": SKU, "region": REGION}).json()
        assert again["context"]["planned_runs"] == 1 and [r["id"] for r in again["planned_runs"]] == [run["id"]]
        assert again["created"] == [] and rid in {h["reservation_id"] for h in again["held"]}
        gone = ann.delete(f"/v1/planned-runs/{run['id']}").json()  # the reservation is not cancelled with the run
        assert gone["status"] == "cancelled" and gone["reserved_ahead"] == bought


def test_plans_propose_names_the_planned_run_reserve_in_what_it_creates(
    database: Database, make_server: ServerFactory
) -> None:
    """Through POST /v1/plans:propose: the created reservation's reason is the proposal's ``planned_run_reserve``
    and the response names the run it read."""
    s = make_server(database)
    _teams(s)
    with s.client("ml_platform_admin", "bob") as bob, s.client("app_team", "ann", "team-p") as ann:
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 8.0)}).status_code == 200
        assert bob.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16}).status_code == 200
        run = ann.post("/v1/planned-runs", json=_run(probability=0.9)).json()
        plan = bob.post("/v1/plans:propose", json={"sku": SKU, "region": REGION}).json()
        assert plan["context"]["planned_runs"] == 1
        assert plan["planned_runs"] == [
            {
                "id": run["id"],
                "name": "pretrain-70b",
                "team": "team-p",
                "gpus": 64,
                "start_s": run["start_s"],
                "duration_s": 14 * DAY,
                "probability": 0.9,
                "order_from_s": plan["context"]["now_s"],
            }
        ]  # fmt: skip  (this week's review, on the grid today, is the last whose order lands by the start)
        reserve = [c for c in plan["created"] if c["reason"].startswith(REASON)]
        assert len(reserve) == 1 and reserve[0]["status"] == "pending_approval" and reserve[0]["pool"] == RESERVED
        assert "pretrain-70b" in reserve[0]["reason"]
        got = bob.get(f"/v1/reservations/{reserve[0]['reservation_id']}").json()
        assert got["status"] == "pending_approval" and got["units"] == reserve[0]["units"]


def test_a_run_a_later_review_still_orders_for_in_time_is_read_but_not_ordered_yet(
    database: Database, make_server: ServerFactory
) -> None:
    """A run whose order can wait for a later weekly review (that one still lands by the start) is listed with
    ``order_from_s`` after the pass's now, and nothing is reserved ahead of it yet."""
    s = make_server(database)
    _teams(s)
    with s.client("ml_platform_admin", "bob") as bob, s.client("app_team", "ann", "team-p") as ann:
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 8.0)}).status_code == 200
        assert bob.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16}).status_code == 200
        assert ann.post("/v1/planned-runs", json=_run(start_s=NOW_S + 40 * DAY)).status_code == 201
        plan = bob.post("/v1/plans:propose", json={"sku": SKU, "region": REGION}).json()
        (listed,) = plan["planned_runs"]
        # the reserved pool's lead is 14 days: the review 3 weeks on (day 21, landing day 35) is the last in time
        assert listed["order_from_s"] == NOW_S // (7 * DAY) * (7 * DAY) + 21 * DAY > plan["context"]["now_s"]
        assert not [c for c in plan["created"] if c["reason"].startswith(REASON)]


def test_a_run_in_another_region_is_planned_there_and_one_without_a_reserved_pool_is_named(
    database: Database, make_server: ServerFactory
) -> None:
    """A run registered in another region with a reserved pool of the SKU is planned there, from that region's own
    use (none here: 28 days of zeros), and the SKU's main region does not read it. A run whose region has lost its
    reserved pool since registration is named in the pass (not silently dropped). A SKU not used yet is planned in
    its runs' region from zeros. (Before regions were split, the west run was only named, never reserved ahead of.)"""
    s = make_server(database)
    _teams(s)
    with s.client("ml_platform_admin", "bob") as bob:
        pool = {"id": f"aws/us-west-2/{SKU}/reserved", "provider_id": "aws", "region_id": "us-west-2", "sku_id": SKU, "tier": "reserved",
                "price_usd_per_gpu_h": "4.3619", "term_months": 12, "lead_time_s": 14 * DAY}  # fmt: skip
        assert bob.post("/v1/pools", json=pool).status_code == 201
        west_od = {**pool, "id": f"aws/us-west-2/{SKU}/on_demand", "tier": "on_demand", "quota_gpus": 16}
        del west_od["term_months"], west_od["lead_time_s"]
        assert bob.post("/v1/pools", json={**west_od, "price_usd_per_gpu_h": "6.88"}).status_code == 201
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 8.0)}).status_code == 200
        assert bob.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16}).status_code == 200
        west = bob.post("/v1/planned-runs", json=_run(region="us-west-2")).json()
        a100 = bob.post("/v1/planned-runs", json=_run(name="a100-run", sku="a100_80gb")).json()
        # a third region's reserved pool is removed after a run was registered there (nothing was ordered from it)
        central_pool = {**pool, "id": f"nebius/us-central1/{SKU}/reserved", "provider_id": "nebius",
                        "region_id": "us-central1"}  # fmt: skip
        assert bob.post("/v1/pools", json=central_pool).status_code == 201
        central = bob.post("/v1/planned-runs", json=_run(name="c", region="us-central1")).json()
        assert bob.delete(f"/v1/pools/{central_pool['id']}").status_code == 204
    entries = s.services.reconciler.run_once().proposals
    main, there = [p for p in entries if p["sku"] == SKU]
    assert (main["region"], there["region"]) == (REGION, "us-west-2")
    assert main["context"]["planned_runs"] == 0 and main["planned_runs_not_read"] == [central["id"]]
    assert main["context"]["use_read"] == {"own_region": False, "excluded_regions": ["us-west-2"]}
    assert not any(p["reason"].startswith(REASON) for p in main["proposed"])
    assert there["region_reason"] == "planned_runs_region" and there["context"]["planned_runs"] == 1
    assert there["context"]["history_hours"] == 28 * 24 and there["context"]["use_read"]["own_region"] is True
    # 64 GPUs, 16 of the west's on-demand quota; the pool's lead is 14 days, as east's: this week's review orders it
    (ahead,) = [p for p in there["proposed"] if p["reason"].startswith(REASON)]
    assert ahead["units"] >= 48 and there["created"], there
    (east,) = [p for p in entries if p["sku"] == "a100_80gb"]  # read from 28 days of zeros
    assert east["region"] == REGION
    assert east["region_reason"] == "planned_runs_region" and "error" not in east, east
    assert east["context"]["planned_runs"] == 1 and east["context"]["history_hours"] == 28 * 24
    assert east["created"] == [] and east["proposed"] == []  # its on-demand pool has no quota: it carries the run
    assert a100["id"] not in str(main) + str(there) and "planned_runs_not_read" not in there
    with s.client("viewer", "vic") as vic:  # the run lists what was bought ahead of it, in its region
        listed = vic.get(f"/v1/planned-runs/{west['id']}").json()["reserved_ahead"]
        got = {r["reservation_id"]: r for r in vic.get("/v1/reservations").json()}
    assert [r["reservation_id"] for r in listed] == there["created"]
    assert {got[i]["region"] for i in there["created"]} == {"us-west-2"}


def test_the_first_run_on_a_sku_not_used_yet_is_reserved_ahead_of(
    database: Database, make_server: ServerFactory
) -> None:
    """No utilization of the SKU at all; its on-demand quota is 16 GPUs and a 64-GPU run is registered after the
    reserved pool's lead time. Before the run, plans:propose refuses the SKU (nothing to plan from); with the run
    registered, the reconciler's pass plans it from 28 days of zeros, as the simulator sees a SKU nobody runs on,
    and reserves ahead of the run: exactly the loop's procurer's proposal on that context."""
    s = make_server(database)
    _teams(s)
    sku, od = "a100_80gb", f"aws/{REGION}/a100_80gb/on_demand"
    with s.client("ml_platform_admin", "bob") as bob, s.client("finops_admin", "fay") as fay:
        assert bob.patch(f"/v1/pools/{od}", json={"quota_gpus": 16}).status_code == 200
        _problem(fay.post("/v1/plans:propose", json={"sku": sku, "region": REGION}), 422, "sku")
        run = bob.post("/v1/planned-runs", json=_run(sku=sku)).json()
        procurement = s.services.procurement
        loop = ControlLoop.gpufleet(0, tier_limits=procurement.tier_limits([sku]))
        ctx, _held = procurement.context(sku, REGION, loop, forecast_h=7 * 24)
        assert ctx.demand_history_gpus.tolist() == [0.0] * (28 * 24) and len(ctx.planned_runs) == 1
        expected = loop.procurer.propose(ctx)
        assert [p.reason.startswith(REASON) for p in expected] == [True] and expected[0].units >= 48, expected
        (entry,) = [p for p in s.services.reconciler.run_once().proposals if p["sku"] == sku]
        assert entry["region"] == REGION and entry["region_reason"] == "planned_runs_region"
        assert [(p["units"], p["start_s"], p["term_months"], p["reason"]) for p in entry["proposed"]] == [
            (p.units, p.start_s, p.term_months, p.reason) for p in expected
        ]
        (rid,) = entry["created"]
        got = bob.get(f"/v1/reservations/{rid}").json()
        assert got["status"] == "pending_approval" and got["units"] == expected[0].units
        events = bob.get("/v1/audit", params={"entity_id": rid, "action": "reservation.proposed_by_loop"}).json()
        assert events[0]["detail"]["planned_runs"] == [run["id"]]
        (ahead,) = bob.get(f"/v1/planned-runs/{run['id']}").json()["reserved_ahead"]
        assert ahead["reservation_id"] == rid and ahead["status"] == "pending_approval"
        again = fay.post("/v1/plans:propose", json={"sku": sku, "region": REGION})
        assert again.status_code == 200 and again.json()["created"] == []  # held now: nothing bought twice
