"""Placement with degradation, quota outlook, plan proposals, forecast accuracy and autoscaling decisions,
driven over HTTP against a live server on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpufleet.control.loop import ControlLoop
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

DAY = 86400
SKU = "h100_80gb"
SERVING_GPUS = 64.0
OD = f"aws/us-east-1/{SKU}/on_demand"
RESERVED = f"aws/us-east-1/{SKU}/reserved"


def _hourly(start_s: int, days: int, gpus: Any, workload: str = "wl-plan") -> list[dict[str, Any]]:
    """Hourly records; ``gpus`` is a constant or a per-day sequence."""
    per_day = [float(gpus)] * days if isinstance(gpus, int | float) else [float(g) for g in gpus]
    return [
        {
            "source": "dcgm",
            "bucket_start_s": start_s + d * DAY + h * 3600,
            "bucket_s": 3600,
            "workload_id": workload,
            "team_id": "team-p",
            "sku_id": SKU,
            "gpus_allocated": per_day[d],
            "gpu_util": 0.6,
        }
        for d in range(days)
        for h in range(24)
    ]


def _ingest(server: LiveServer, records: list[dict[str, Any]]) -> None:
    with server.client("ml_platform_admin", "bob") as c:
        r = c.post("/v1/utilization:ingest", json={"records": records})
        assert r.status_code == 200, r.text


def test_placement_walks_the_chain_then_degrades_preempts_or_queues(
    database: Database, make_server: ServerFactory
) -> None:
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as c, s.client("app_team", "ann", "team-p") as app:
        assert c.post("/v1/teams", json={"id": "team-p", "name": "P"}).status_code == 201  # a token's team exists
        # 8 of 16 on-demand GPUs run (allocated_gpus): the running work listed below must fit in them
        assert c.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 8}).status_code == 200
        serving = {"job_class": "serving", "priority": "critical", "sku": SKU, "gpus": 8, "replicas": 2}
        rec = app.post("/v1/placement/recommendations", json=serving).json()
        # reserved has no active reservation and on-demand only 8 free: both skipped; spot never for serving
        triggers = {x["pool"]: x["trigger"] for x in rec["skipped"]}
        assert triggers[RESERVED] == "quota_headroom" and triggers[OD] == "quota_headroom"
        assert "serving_never_spot" in triggers.values()
        assert rec["action"] == "place" and rec["tier"] == "secondary" and rec["gpus"] == 16
        assert rec["fallback"][-1] == {
            "pool": None,
            "region": None,
            "tier": None,
            "trigger": "queue_when_all_pools_exhausted",
        }

        sec = rec["pool"]
        sig = c.put("/v1/placement/signals", json={"pool": sec, "stockout": True, "queue_wait_s": 7200})
        assert sig.status_code == 200 and sig.json()["stockout"] is True
        assert app.put("/v1/placement/signals", json={"pool": sec, "stockout": False}).status_code == 403
        assert c.put("/v1/placement/signals", json={"pool": "nope/x", "stockout": True}).status_code == 404

        # the stocked-out pool is an explicit link, never an error; the declared degrade option fits on-demand
        degraded = app.post(
            "/v1/placement/recommendations", json={**serving, "degrade_options": [{"min_replicas": 1}]}
        ).json()
        assert {"pool": sec, "trigger": "stockout"}.items() <= next(
            x for x in degraded["skipped"] if x["pool"] == sec
        ).items()
        assert degraded["action"] == "degrade" and degraded["reason"] == "degraded"
        assert degraded["pool"] == OD and degraded["gpus"] == 8
        assert degraded["degrade"] == {"gpus": None, "sku": None, "min_replicas": 1}

        running = [{"workload_id": "wl-batch", "pool": OD, "gpus": 8, "priority": "low", "job_class": "training"}]
        pre = app.post("/v1/placement/recommendations", json={**serving, "running": running}).json()
        assert pre["action"] == "preempt" and pre["reason"] == "preempt_lower_priority"
        assert pre["pool"] == OD and pre["victims"] == ["wl-batch"]

        # nothing fits: a queue decision with the expected start from the pool's wait, checked against the deadline
        ok = app.post("/v1/placement/recommendations", json={**serving, "deadline_s": NOW_S + 5 * DAY}).json()
        assert ok["action"] == "queue" and ok["pool"] is None and ok["reason"] == "queued_deadline_ok"
        assert ok["expected_start_s"] == NOW_S + 7200
        late = app.post(
            "/v1/placement/recommendations",
            json={**serving, "deadline_s": NOW_S + 3600, "expected_run_s": 1800},
        ).json()
        assert late["reason"] == "queued_deadline_at_risk" and late["expected_start_s"] == NOW_S + 7200

        # checkpointable training may use spot when everything else is exhausted
        train = {"job_class": "training", "priority": "high", "sku": SKU, "gpus": 16, "checkpointable": True}
        spot = app.post("/v1/placement/recommendations", json=train).json()
        assert spot["tier"] == "spot" and spot["reason"] == "placed_spot"
        bad = app.post("/v1/placement/recommendations", json={**train, "gpus": 0})
        assert bad.status_code == 422 and bad.json()["field"] == "gpus"
        unknown = app.post("/v1/placement/recommendations", json={**train, "sku": "zz9"})
        assert unknown.status_code == 422 and unknown.json()["field"] == "sku"


def test_quota_outlook_dates_follow_the_served_forecast(database: Database, make_server: ServerFactory) -> None:
    s = make_server(database)
    _ingest(s, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with s.client("ml_platform_admin", "bob") as c, s.client("viewer", "vic") as v:
        p90 = np.array(
            [d["p90"] for d in v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 60}).json()["demand"]]
        )
        assert p90.max() > p90.min()
        quota = int(np.floor(np.median(p90)))
        c.patch(f"/v1/pools/{OD}", json={"quota_gpus": quota})
        out = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60, "increase_lead_days": 10}).json()
        pool = next(p for p in out["pools"] if p["pool"] == OD)
        # by hand: the first day whose p90 (nothing committed) exceeds the quota, minus the 10-day lead time
        first = int(np.flatnonzero(p90 > quota)[0])
        exhausts = NOW_S + first * DAY
        assert pool["exhausts_at_s"] == exhausts and pool["request_by_s"] == exhausts - 10 * DAY
        expected = (
            "exhausted"
            if exhausts <= NOW_S
            else "overdue"
            if exhausts - 10 * DAY < NOW_S
            else "request_now"
            if exhausts - 10 * DAY <= NOW_S + 7 * DAY
            else "on_track"
        )
        assert pool["reason"] == expected and pool["quota_gpus"] == quota
        assert pool["provider"] == "aws" and pool["region"] == "us-east-1" and pool["sku"] == SKU
        assert all(p["reason"] == "no_quota" for p in out["pools"] if p["quota_gpus"] is None)
        assert all(p["tier"] != "reserved" for p in out["pools"])
        assert v.get("/v1/quotas/outlook", params={"sku": "zz9"}).json()["field"] == "sku"


def test_plans_propose_creates_what_the_loops_procurer_proposes_once(
    database: Database, make_server: ServerFactory
) -> None:
    """POST /v1/plans:propose asks the loop's procurer (the reconciler's and the simulator's) through
    ports.Procurer.propose: on the same context, the reservations it creates are exactly that procurer's proposals;
    they enter the dual-approval workflow; a re-run buys nothing twice."""
    s = make_server(database)
    _ingest(s, _hourly(NOW_S - 28 * DAY, 28, 24))
    procurement = s.services.procurement
    loop = ControlLoop.gpufleet(0, tier_limits=procurement.tier_limits([SKU]))
    ctx, held = procurement.context(SKU, "us-east-1", loop, forecast_h=7 * 24)
    assert held == [] and ctx.committed_gpus_at_lead == 0 and ctx.pool.id == RESERVED
    np.testing.assert_array_equal(ctx.demand_history_gpus, np.full(28 * 24, 24.0))  # the ingested hours
    assert ctx.forecast is not None  # the loop's forecast is in the context, as the simulator's desk gives it
    expected = loop.procurer.propose(ctx)
    assert expected and all(p.units > 0 and p.pool_id == RESERVED for p in expected), expected
    body = {"sku": SKU, "region": "us-east-1"}
    with (
        s.client("finops_admin", "fay") as planner,
        s.client("finops_admin", "fred") as fin,
        s.client("ml_platform_admin", "bob") as ml,
        s.client("viewer", "vic") as v,
    ):
        assert v.post("/v1/plans:propose", json=body).status_code == 403
        assert v.get("/v1/reservations").json() == []  # the refused viewer created nothing
        first = planner.post("/v1/plans:propose", json=body)
        assert first.status_code == 200, first.text
        plan = first.json()
        assert plan["procurer"] == type(loop.procurer).__name__
        assert plan["context"] == {
            "now_s": NOW_S, "pool": RESERVED, "history_hours": 28 * 24, "late_hours_filled": 0, "forecast": ctx.forecast.method,
            "committed_gpus_at_lead": 0, "gpus_per_node": 8, "planned_runs": 0, "serving_history_hours": None,
            "use_read": {"own_region": False, "excluded_regions": []},  # one region planned: all of its use
        }  # fmt: skip
        assert plan["proposals"] == [
            {"units": p.units, "start_s": p.start_s, "term_months": p.term_months, "reason": p.reason} for p in expected
        ]
        made = v.get("/v1/reservations").json()
        assert sorted((r["units"], r["start_s"], r["term_months"], r["pool"]) for r in made) == sorted(
            (p.units, p.start_s, p.term_months, p.pool_id) for p in expected
        )
        assert sorted(c["reservation_id"] for c in plan["created"]) == sorted(r["reservation_id"] for r in made)
        assert all(c["idempotency_key"].startswith("plan-") and c["tier"] == "reserved" for c in plan["created"])
        again = planner.post("/v1/plans:propose", json=body).json()
        assert again["created"] == [] and again["proposals"] == []  # held (pending) now: nothing bought twice
        assert again["context"]["committed_gpus_at_lead"] == sum(p.units for p in expected)
        assert {h["reservation_id"] for h in again["held"]} == {r["reservation_id"] for r in plan["created"]}
        assert len(v.get("/v1/reservations").json()) == len(made)
        # one rule: the reconciler's pass, asking the same procurer on the same store, buys nothing more either
        (entry,) = s.services.reconciler.run_once().proposals
        assert entry["region"] == "us-east-1" and entry["created"] == [] and entry["proposed"] == []
        res = plan["created"][0]
        assert res["status"] == "pending_approval" and res["approvals_required"] == 2 and res["start_s"] >= NOW_S
        rid = res["reservation_id"]
        assert fin.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ml-2026"}).status_code == 200
        assert v.get(f"/v1/reservations/{rid}").json()["status"] == "pending_approval"  # one approval is not enough
        assert (
            fin.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ml-2026"}).status_code == 409
        )  # same user twice
        done = ml.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ml-2026"})
        assert done.status_code == 200 and done.json()["status"] == "submitted_to_cloud"
        # the planner who proposed the order may not approve it
        assert planner.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "x"}).status_code in (403, 409)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"region": "mars-1"}, "region"),
        ({"sku": "zz9"}, "sku"),
        ({"sku": None}, "sku"),
        ({"within_days": 0}, "within_days"),
        ({"within_days": "7"}, "within_days"),
        ({"horizon_days": 180}, "horizon_days"),  # the portfolio planner's inputs are no longer taken
        ({"workload_class": "serving"}, "workload_class"),
    ],
)
def test_plans_propose_refuses_a_bad_body_naming_the_field(
    shared_server: LiveServer, change: dict[str, Any], field: str
) -> None:
    body = {k: v for k, v in {"sku": SKU, "region": "us-east-1", **change}.items() if v is not None}
    with shared_server.client("finops_admin", "fay") as c:
        r = c.post("/v1/plans:propose", json=body)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json") and r.json()["field"] == field
        assert c.get("/v1/reservations").json() == []


def test_forecast_accuracy_matches_a_hand_computed_example(database: Database, make_server: ServerFactory) -> None:
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    _ingest(s, _hourly(NOW_S - 14 * DAY, 14, 8))  # 14 days at a constant 8 GPUs: MASE scale = mean |y| = 8
    with s.client("viewer", "vic") as v:
        fc = v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 7}).json()
        v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 7})  # the same forecast again: stored once
        acc = v.get("/v1/capacity/forecast/accuracy", params={"sku": SKU}).json()["series"][0]
        assert acc["forecasts_pending"] == 1 and acc["forecasts_scored"] == 0 and acc["mase"] is None
        _ingest(s, _hourly(NOW_S, 3, [10, 6, 8]))  # the actuals of the first three forecast days
        clock.advance(3 * DAY)
        acc = v.get("/v1/capacity/forecast/accuracy", params={"sku": SKU}).json()["series"][0]
    a = np.array([10.0, 6.0, 8.0])
    q = {lvl: np.array([d[lvl] for d in fc["demand"][:3]]) for lvl in ("p10", "p50", "p90")}
    levels = {"p10": 0.1, "p50": 0.5, "p90": 0.9}
    mase = np.mean(np.abs(a - q["p50"])) / 8
    pinball = (
        np.mean([np.mean(np.where(a >= q[k], levels[k] * (a - q[k]), (1 - levels[k]) * (q[k] - a))) for k in levels])
        / 8
    )
    coverage = np.mean((a >= q["p10"]) & (a <= q["p90"]))
    assert acc["forecasts_scored"] == 1 and acc["points"] == 3 and acc["forecasts_pending"] == 0
    assert acc["mase"] == pytest.approx(mase, abs=1e-3)
    assert acc["pinball"] == pytest.approx(pinball, abs=1e-3)
    assert acc["coverage_80"] == pytest.approx(coverage)
    if np.allclose(q["p50"], 8.0):  # the median of a flat history is flat: MASE = (|10-8| + |6-8| + 0) / 3 / 8
        assert acc["mase"] == pytest.approx(1 / 6, abs=1e-6)


def test_autoscaling_decision_stays_in_bounds_and_reports_the_budget(
    database: Database, make_server: ServerFactory
) -> None:
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as c:
        c.post("/v1/teams", json={"id": "team-p", "name": "P"})
        c.post("/v1/tenants", json={"id": "team-p-prod", "name": "prod", "team_id": "team-p"})
        c.post("/v1/teams", json={"id": "team-q", "name": "Q"})
    wl = {
        "name": "chat",
        "image": "registry.example/llm:1",
        "cpu": 8,
        "mem_gb": 64,
        "gpus": 1,
        "gpu_sku": SKU,
        "min_replicas": 1,
        "max_replicas": 4,
        "scale_metric": "rps",
        "team": "team-p",
        "tenant": "team-p-prod",
        "priority": "critical",
    }
    with s.client("app_team", "ann", "team-p") as app, s.client("app_team", "quinn", "team-q") as other:
        wid = app.post("/v1/workloads", json=wl).json()["workload_id"]
        url = f"/v1/workloads/{wid}/autoscaling/decision"
        assert app.get(url, params={"rps": 5}).json()["field"] == "target_rps"  # not configured yet
        assert (
            app.put(
                f"/v1/workloads/{wid}/autoscaling", json={"min": 2, "max": 6, "target_rps": 10, "version": 1}
            ).json()["version"]
            == 2
        )
        steady = app.get(url, params={"rps": [30.0] * 60, "replicas": 4}).json()
        assert 2 <= steady["desired_replicas"] <= 6 and steady["reason"] and steady["version"] == 2
        assert steady["budget"]["budget_usd_day"] is None and steady["budget"]["bound"] is False
        assert steady["budget"]["spend_usd_day"] == pytest.approx(
            steady["desired_replicas"] * steady["budget"]["price_usd_per_replica_h"] * 24, abs=0.01
        )
        surge = app.get(url, params={"rps": [1000.0] * 10}).json()
        assert surge["desired_replicas"] == 6 and surge["reason"] == "clamped_max"
        idle = app.get(url, params={"rps": [0.0] * 10, "replicas": 6}).json()
        assert idle["desired_replicas"] >= 2
        assert other.get(url, params={"rps": 5}).status_code == 404  # another team's id: as if it did not exist
        assert app.get("/v1/workloads/wl_nope/autoscaling/decision", params={"rps": 5}).status_code == 404
        assert app.get(url).status_code == 422

        capped = app.post("/v1/workloads", json={**wl, "name": "cheap", "budget_usd_day": 200}).json()["workload_id"]
        app.put(f"/v1/workloads/{capped}/autoscaling", json={"min": 1, "max": 6, "target_rps": 10, "version": 1})
        d = app.get(f"/v1/workloads/{capped}/autoscaling/decision", params={"rps": [1000.0] * 10}).json()
        per_day = d["budget"]["price_usd_per_replica_h"] * 24
        assert d["budget"]["bound"] is True and d["reason"].startswith("budget_")
        assert d["desired_replicas"] == max(1, min(6, int(200 // per_day)))
        assert d["budget"]["spend_usd_day"] <= 200 or d["budget"]["exceeded"]


def test_autoscaling_slo_and_one_request_per_replica_drive_the_decision(
    database: Database, make_server: ServerFactory
) -> None:
    """PUT stores the SLO and the concurrency limit; the decision then holds the replicas that the requests in
    flight needed, and keeps them while the SLO error budget burns."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as c:
        c.post("/v1/teams", json={"id": "team-p", "name": "P"})
        c.post("/v1/tenants", json={"id": "team-p-prod", "name": "prod", "team_id": "team-p"})
    wl = {"name": "sd", "image": "registry.example/sd:1", "cpu": 8, "mem_gb": 64, "gpus": 1, "gpu_sku": SKU,
          "min_replicas": 0, "max_replicas": 20, "scale_metric": "rps", "team": "team-p", "tenant": "team-p-prod",
          "priority": "normal"}  # fmt: skip
    with s.client("app_team", "ann", "team-p") as app:
        wid = app.post("/v1/workloads", json=wl).json()["workload_id"]
        path = f"/v1/workloads/{wid}/autoscaling"
        body = {"min": 0, "max": 20, "target_rps": 0.04, "slo_s": 2.0, "max_concurrency": 1, "version": 1}
        assert app.put(path, json=body).json()["version"] == 2
        stored = app.get(f"/v1/workloads/{wid}").json()
        assert stored["slo_s"] == 2.0 and stored["max_concurrency"] == 1
        # a session of 6 images at once, then a trickle: one request per replica needs 6 replicas for it
        rps = [1.2] + [0.02] * 30
        peak = [6.0] + [1.0] * 30
        d = app.get(
            f"{path}/decision", params={"rps": rps, "peak_in_flight": peak, "replicas": 6, "period_s": 10}
        ).json()
        assert d["slo_s"] == 2.0 and d["max_concurrency"] == 1
        assert d["desired_replicas"] >= 6 and d["reason"] == "burst_floor"
        # 50 min later the floor (10 cold starts of 210 s = 35 min) has forgotten the session ...
        quiet = [0.02] * 300
        later = {"rps": rps + quiet, "peak_in_flight": peak + [1.0] * 300, "replicas": 6, "period_s": 10}
        calm = app.get(f"{path}/decision", params={**later, "slo_misses": [0.0] * 331}).json()
        assert calm["desired_replicas"] < 6
        # ... unless the session's requests missed the SLO: the budget burns and the floor keeps them
        burning = app.get(f"{path}/decision", params={**later, "slo_misses": [3.0] + [0.0] * 330}).json()
        assert burning["desired_replicas"] >= 6 and burning["reason"] == "burst_floor"
        # clearing the optional fields (a PUT) returns to the batching policy without an SLO
        assert app.put(path, json={"min": 0, "max": 20, "target_rps": 0.04, "version": 2}).json()["version"] == 3
        assert app.get(f"/v1/workloads/{wid}").json()["slo_s"] is None


def test_plans_propose_covers_serving_from_the_records_of_serving_workloads(
    database: Database, make_server: ServerFactory
) -> None:
    """The procurer's serving stock-out cover reads the hourly GPUs of the workloads registered as serving (the
    simulator's desk passes its fleets' asks the same way): training records are not in it, and a serving fleet
    that outgrew reserved + secondary capacity gets its cover reserved, with the reason code, through the API."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as c:
        c.post("/v1/teams", json={"id": "team-p", "name": "P"})
        c.post("/v1/tenants", json={"id": "team-p-prod", "name": "prod", "team_id": "team-p"})
        base = {"image": "registry.example/llm:1", "cpu": 8, "mem_gb": 64, "gpus": 8, "gpu_sku": SKU,
                "min_replicas": 1, "max_replicas": 8, "scale_metric": "rps", "team": "team-p",
                "tenant": "team-p-prod", "priority": "critical"}  # fmt: skip
        chat = c.post("/v1/workloads", json={**base, "name": "chat"}).json()["workload_id"]
        train = c.post("/v1/workloads", json={**base, "name": "pretrain", "kind": "training",
                                              "priority": "normal"}).json()["workload_id"]  # fmt: skip
    serving = [0.0] * 21 + [SERVING_GPUS] * 7  # a serving product launched a week ago
    _ingest(
        s, _hourly(NOW_S - 28 * DAY, 28, serving, workload=chat) + _hourly(NOW_S - 28 * DAY, 28, 16, workload=train)
    )
    procurement = s.services.procurement
    loop = ControlLoop.gpufleet(0, tier_limits=procurement.tier_limits([SKU]))
    ctx, _ = procurement.context(SKU, "us-east-1", loop, forecast_h=7 * 24)
    np.testing.assert_array_equal(ctx.demand_history_gpus, np.repeat(np.add(serving, 16.0), 24))
    assert ctx.serving_asks_gpus is not None
    np.testing.assert_array_equal(ctx.serving_asks_gpus, np.repeat(serving, 24))  # serving only
    expected = loop.procurer.propose(ctx)
    (cover,) = [p for p in expected if p.reason.startswith("serving_stockout_cover")]
    # the cover tops reserved up to the serving quantile: what the forecast-led rule bought counts as held
    assert sum(p.units for p in expected) == SERVING_GPUS, expected
    with s.client("finops_admin", "fay") as planner:
        plan = planner.post("/v1/plans:propose", json={"sku": SKU, "region": "us-east-1"}).json()
    assert plan["context"]["serving_history_hours"] == 28 * 24
    assert [(p["units"], p["reason"]) for p in plan["proposals"]] == [(p.units, p.reason) for p in expected]
    assert {(c["units"], c["reason"]) for c in plan["created"]} == {(p.units, p.reason) for p in expected}
    assert cover.units in {c["units"] for c in plan["created"] if c["reason"] == cover.reason}


def test_plans_propose_reports_the_loops_secondary_base_from_launched_use(
    database: Database, make_server: ServerFactory
) -> None:
    """The secondary base (control/secondary_base.py) the simulator launches is decided by the service on what its
    records measured: 40 GPUs ran on demand every hour for 4 weeks, the secondary provider (Nebius, $2.95 against
    $6.88 on demand) promises 32 GPUs, so every node it has room for pays: 4 nodes, the loop's own count on that
    week of use. Without a promised quota there is no base; records that name no pool are not launched use."""
    s = make_server(database)
    secondary = f"nebius/eu-north1/{SKU}/secondary"
    records = _hourly(NOW_S - 28 * DAY, 28, 40)
    with s.client("finops_admin", "fay") as planner, s.client("ml_platform_admin", "bob") as bob:
        _ingest(s, records)  # no pool named: demand, but not use of a launched tier
        plan = planner.post("/v1/plans:propose", json={"sku": SKU, "region": "us-east-1"}).json()
        assert plan["secondary_base"] is None  # no secondary quota stored: nothing promised
        assert bob.patch(f"/v1/pools/{secondary}", json={"quota_gpus": 32}).status_code == 200
        plan = planner.post("/v1/plans:propose", json={"sku": SKU, "region": "us-east-1"}).json()
        assert plan["secondary_base"]["nodes"] == 0 and plan["secondary_base"]["hours_read"] == 7 * 24
        _ingest(s, [{**r, "source": "dcgm-od", "workload_id": "wl-od", "pool_id": OD} for r in records])
        plan = planner.post("/v1/plans:propose", json={"sku": SKU, "region": "us-east-1"}).json()
    rule = ControlLoop.gpufleet(0).secondary_base
    assert rule is not None
    expected = rule.decide([40.0] * 168, 8, secondary_usd=2.95, on_demand_usd=6.88, max_nodes=4)
    assert expected.nodes == 4
    assert plan["secondary_base"] == {
        "pool": secondary, "nodes": 4, "gpus": 32, "hours_read": 7 * 24, "reason": expected.reason
    }  # fmt: skip
    assert plan["secondary_base"]["reason"].startswith("secondary_base: hold 4 secondary nodes")
    # the reconciler's pass reports the same decision
    (entry,) = s.services.reconciler.run_once().proposals
    assert entry["secondary_base"] == plan["secondary_base"]
