"""Team budgets enforced at placement admission, over HTTP on SQLite and PostgreSQL: a request that would
overrun the window's budget is degraded to a declared option that fits or queued until the window resets,
with the reason and the budget figures in the answer and a `budget.admission` event in the audit log; a
request without a budget keeps the old answer (`budget` null)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_EVEN, Decimal

import httpx
from sqlalchemy import text

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory

DAY = 86_400
NOW = NOW_S + 10 * DAY  # 2026-01-11T00:00:00Z: the month window is [2026-01-01, 2026-02-01)
JAN_START, FEB_START = NOW_S, 1_769_904_000
POOL = "aws/us-east-1/h100_80gb/on_demand"


def _cents(x: Decimal) -> float:
    return float(x.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN))


def _util(team: str, start_s: int, hours: int, gpus: float) -> list[dict[str, object]]:
    return [
        {"source": "dcgm", "bucket_start_s": start_s + h * 3600, "bucket_s": 3600, "workload_id": f"wl-{team}",
         "team_id": team, "sku_id": "h100_80gb", "gpus_allocated": gpus, "gpu_util": 0.5}
        for h in range(hours)
    ]  # fmt: skip


def test_budget_degrades_then_queues_then_admits_and_audits(database: Database, make_server: ServerFactory) -> None:
    clock = FixedClock(NOW)
    server = make_server(database, clock=clock)
    with database.engine.connect() as conn:
        min_od = conn.execute(
            text("SELECT min(price_uusd_per_gpu_h) FROM pools WHERE sku_id = 'h100_80gb' AND tier = 'on_demand'")
        ).scalar_one()
        pool_price = conn.execute(
            text("SELECT price_uusd_per_gpu_h FROM pools WHERE id = :p"), {"p": POOL}
        ).scalar_one()
    p_min, p_pool = Decimal(min_od) / 1_000_000, Decimal(pool_price) / 1_000_000
    with server.client("ml_platform_admin", "bob") as admin, server.client("viewer", "vic") as viewer:
        assert admin.put("/v1/teams/t-bud/budget", json={"limit_usd": 10}).status_code == 404
        assert admin.post("/v1/teams", json={"id": "t-bud", "name": "Budgeted"}).status_code == 201
        assert viewer.put("/v1/teams/t-bud/budget", json={"limit_usd": 10}).status_code == 403
        assert viewer.get("/v1/teams/t-bud/budget").status_code == 404
        # 192 GPU-hours in January, and 100 GPUs in the last hour of December (another window: not counted)
        recs = _util("t-bud", NOW - DAY, 24, 8.0) + _util("t-bud", JAN_START - 3600, 1, 100.0)
        assert admin.post("/v1/utilization:ingest", json={"records": recs}).json()["inserted"] == 25
        metered = 192 * p_min
        limit = (metered + 100).quantize(Decimal("0.01"))
        r = admin.put("/v1/teams/t-bud/budget", json={"limit_usd": str(limit), "period": "month"})
        assert r.status_code == 200, r.text
        st = r.json()
        assert (st["window_start_s"], st["window_end_s"]) == (JAN_START, FEB_START)
        assert st["metered_usd"] == _cents(metered) and st["committed_usd"] == 0 and st["limit_usd"] == float(limit)

        # 8 GPUs for 10 h (~550 $) does not fit the ~100 $ left; the declared 1-GPU option (~69 $) does
        body = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 8, "team": "t-bud",
                "expected_run_s": 36_000, "degrade_options": [{"gpus": 1}], "admit": True}  # fmt: skip
        preview = viewer.post("/v1/placement/recommendations", json={**body, "admit": False}).json()
        assert preview["budget"]["action"] == "degrade" and preview["budget"]["booked"] is False
        rec = admin.post("/v1/placement/recommendations", json=body).json()
        assert rec["budget"]["booked"] is True
        b = rec["budget"]
        assert (rec["action"], rec["reason"], rec["gpus"], rec["pool"]) == ("degrade", "over_budget_degraded", 1, POOL)
        assert rec["degrade"] == {"gpus": 1, "sku": None, "min_replicas": None}
        assert (b["action"], b["reason"], b["option"]) == ("degrade", "over_budget_degraded", "degrade_options[0]")
        assert b["request_usd"] == _cents(80 * p_pool) and b["admitted_usd"] == _cents(10 * p_pool)
        assert b["metered_usd"] == _cents(metered) and b["committed_usd"] == 0 and b["retry_at_s"] is None

        # the degraded job's 10 GPU-hours are now committed: 8 GPUs without a fitting option are queued
        rec = admin.post("/v1/placement/recommendations", json={**body, "degrade_options": []}).json()
        b = rec["budget"]
        assert (rec["action"], rec["reason"], rec["pool"], rec["expected_start_s"]) == (
            "queue",
            "over_budget_queued",
            None,
            FEB_START,
        )
        assert (b["action"], b["retry_at_s"], b["admitted_usd"]) == ("queue", FEB_START, None)
        assert b["committed_usd"] == _cents(10 * p_pool)
        assert b["spent_usd"] + b["request_usd"] > b["limit_usd"]

        # a small job that fits is admitted as placed
        small = {**body, "gpus": 1, "expected_run_s": 3600, "degrade_options": []}
        rec = admin.post("/v1/placement/recommendations", json=small).json()
        assert (rec["action"], rec["pool"], rec["budget"]["action"], rec["budget"]["reason"]) == (
            "place",
            POOL,
            "admit",
            "within_budget",
        )

        events = admin.get("/v1/audit", params={"entity_id": "t-bud", "action": "budget.admission"}).json()
        assert [(e["actor"], e["detail"]["action"], e["detail"]["reason"]) for e in events] == [
            ("bob", "degrade", "over_budget_degraded"),
            ("bob", "queue", "over_budget_queued"),
            ("bob", "admit", "within_budget"),
        ]
        assert float(events[1]["detail"]["request_usd"]) == _cents(80 * p_pool)  # Decimals are logged as strings
        assert events[1]["detail"]["retry_at_s"] == FEB_START and events[0]["detail"]["option"] == "degrade_options[0]"

        st = viewer.get("/v1/teams/t-bud/budget").json()
        assert st["committed_usd"] == _cents(11 * p_pool)
        assert st["spent_usd"] == _cents(metered + 11 * p_pool)

        # without a team (or for a team without a budget) the answer is the old one, budget null
        plain = viewer.post("/v1/placement/recommendations", json={**body, "team": None, "admit": False}).json()
        assert (plain["action"], plain["gpus"], plain["budget"]) == ("place", 8, None)

        # a new month: a fresh window, the January commitments ended; the big job is admitted
        clock.set(FEB_START + 3600)
        rec = admin.post("/v1/placement/recommendations", json=body).json()
        assert (rec["action"], rec["gpus"], rec["budget"]["action"], rec["budget"]["metered_usd"]) == (
            "place",
            8,
            "admit",
            0,
        )


def test_budget_roles_team_fence_and_report_only(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database, clock=FixedClock(NOW))
    with server.client("finops_admin", "alice") as admin:
        for team in ("t-a", "t-b"):
            assert admin.post("/v1/teams", json={"id": team, "name": team}).status_code == 201
        assert admin.put("/v1/teams/t-a/budget", json={"limit_usd": 50}).status_code == 200
        r = admin.put("/v1/teams/t-b/budget", json={"limit_usd": 50, "enforce": False, "period": "week"})
        assert r.status_code == 200 and r.json()["window_start_s"] == NOW_S + 4 * DAY  # Monday 2026-01-05
        assert admin.put("/v1/teams/t-a/budget", json={"limit_usd": -1}).json()["field"] == "limit_usd"
        assert admin.put("/v1/teams/t-a/budget", json={"limit_usd": 5, "period": "year"}).status_code == 422
    body = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 8, "admit": True}
    with server.client("app_team", "ann", team="t-a") as ann:
        # an app_team token is budgeted as its own team by default, and may not name another team
        rec = ann.post("/v1/placement/recommendations", json=body).json()
        assert (rec["action"], rec["budget"]["team"], rec["budget"]["action"]) == ("queue", "t-a", "queue")
        assert ann.post("/v1/placement/recommendations", json={**body, "team": "t-b"}).status_code == 403
        assert ann.get("/v1/teams/t-b/budget").status_code == 403
        assert ann.get("/v1/teams/t-a/budget").json()["committed_usd"] == 0
    with server.client("viewer", "vic") as v, server.client("finops_admin", "alice") as admin:
        # enforce=false: admitted, but the answer carries the alerts (never a silent overrun)
        rec = admin.post("/v1/placement/recommendations", json={**body, "team": "t-b"}).json()
        assert (rec["action"], rec["budget"]["action"], rec["budget"]["enforce"]) == ("place", "admit", False)
        st = v.get("/v1/teams/t-b/budget").json()
        assert st["fraction_used"] > 1 and any(a["reason"] == "budget_exceeded" for a in st["alerts"])
        unknown = v.post("/v1/placement/recommendations", json={**body, "team": "nope", "admit": False})
        assert unknown.status_code == 422 and unknown.json()["field"] == "team"
    with server.client("finops_admin", "alice") as admin:
        assert admin.delete("/v1/teams/t-a/budget").status_code == 204
        assert admin.get("/v1/teams/t-a/budget").status_code == 404


def test_concurrent_requests_cannot_both_take_the_last_dollars(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database, clock=FixedClock(NOW))
    with database.engine.connect() as conn:
        price = conn.execute(text("SELECT price_uusd_per_gpu_h FROM pools WHERE id = :p"), {"p": POOL}).scalar_one()
    one_job = Decimal(price) / 1_000_000  # 1 GPU for 1 hour
    with server.client("finops_admin", "alice") as admin:
        assert admin.post("/v1/teams", json={"id": "t-race", "name": "race"}).status_code == 201
        limit = str((3 * one_job + one_job / 2).quantize(Decimal("0.01")))  # room for three jobs, not four
        assert admin.put("/v1/teams/t-race/budget", json={"limit_usd": limit}).status_code == 200
    body = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 1, "team": "t-race",
            "expected_run_s": 3600}  # fmt: skip
    token = server.token("ml_platform_admin", "bob")
    body["admit"] = True

    def ask(_: int) -> str:
        with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            r = c.post("/v1/placement/recommendations", json=body)
            assert r.status_code == 200, r.text
            return str(r.json()["budget"]["action"])

    with ThreadPoolExecutor(max_workers=10) as pool:
        actions = list(pool.map(ask, range(10)))
    assert sorted(actions) == ["admit"] * 3 + ["queue"] * 7
    with server.client("viewer", "vic") as v:
        assert v.get("/v1/teams/t-race/budget").json()["committed_usd"] == _cents(3 * one_job)
