"""A SKU used in two regions (service/plan_regions.py), on SQLite and PostgreSQL: the reconciler's pass plans each
region with a reserved pool on the use measured there, and the main region on the rest (records naming no pool),
so no GPU-hour is bought twice or dropped; ``POST /v1/plans:propose`` reads the same plan, and refuses a region
where nothing of the SKU is planned."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from gpufleet.control.loop import ControlLoop
from gpufleet.control.proposing import PlanRegion
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

DAY = 86_400
SKU = "h100_80gb"
EAST, WEST = "us-east-1", "us-west-2"


def _hours(gpus: float, pool: str | None, source: str) -> list[dict[str, Any]]:
    return [
        {"source": source, "bucket_start_s": NOW_S - 28 * DAY + h * 3600, "bucket_s": 3600, "workload_id": "wl",
         "team_id": "team-r", "sku_id": SKU, "pool_id": pool, "gpus_allocated": gpus, "gpu_util": 0.6}
        for h in range(28 * 24)
    ]  # fmt: skip


def _two_regions(s: LiveServer) -> None:
    """us-east-1 (seeded) and us-west-2 (added) each with a reserved and an on-demand pool of the SKU (west's with a
    quota of 8 GPUs, east's with none stated); 24 GPUs run in the east's on-demand pool, 16 in the west's, and 8 more
    are reported with no pool, around the clock."""
    with s.client("ml_platform_admin", "bob") as bob:
        for tier, extra in (
            ("reserved", {"term_months": 12, "lead_time_s": 14 * DAY}),
            ("on_demand", {"quota_gpus": 8}),
        ):
            pool = {"id": f"aws/{WEST}/{SKU}/{tier}", "provider_id": "aws", "region_id": WEST, "sku_id": SKU,
                    "tier": tier, "price_usd_per_gpu_h": "4.3619" if tier == "reserved" else "6.88", **extra}  # fmt: skip
            assert bob.post("/v1/pools", json=pool).status_code == 201
        records = (
            _hours(24, f"aws/{EAST}/{SKU}/on_demand", "dcgm-east")
            + _hours(16, f"aws/{WEST}/{SKU}/on_demand", "dcgm-west")
            + _hours(8, None, "billing")
        )
        r = bob.post("/v1/utilization:ingest", json={"records": records})
        assert r.status_code == 200, r.text


def test_each_region_is_planned_on_its_own_use_and_the_main_one_on_the_rest(
    database: Database, make_server: ServerFactory
) -> None:
    s = make_server(database)
    _two_regions(s)
    procurement = s.services.procurement
    plans = procurement.plan_map(NOW_S).regions[SKU]
    assert plans == (
        PlanRegion(EAST, "most_used_region", excluded=(WEST,)),
        PlanRegion(WEST, "used_region", own_only=True),
    )
    # each plan counts the quotas of the regions it reads: the west's 8 on-demand GPUs are the west's alone
    main, west = plans
    assert math.isinf(procurement.tier_limits([SKU])[SKU].on_demand_quota_gpus)  # east states none: no ceiling
    assert procurement.tier_limits([SKU], {SKU: west})[SKU].on_demand_quota_gpus == 8
    assert math.isinf(procurement.tier_limits([SKU], {SKU: main})[SKU].on_demand_quota_gpus)
    # the contexts the simulator's desk would build: east reads its 24 GPUs and the 8 with no pool, west its 16
    expected = {}
    for plan in plans:
        loop = ControlLoop.gpufleet(0, tier_limits=procurement.tier_limits([SKU], {SKU: plan}))
        ctx, _ = procurement.context(SKU, plan.region, loop, forecast_h=7 * 24)
        assert ctx.pool.id == f"aws/{plan.region}/{SKU}/reserved"
        np.testing.assert_array_equal(ctx.demand_history_gpus, np.full(28 * 24, 32.0 if plan is main else 16.0))
        expected[plan.region] = loop.procurer.propose(ctx)
    assert sum(p.units for p in expected[EAST]) == 32 and sum(p.units for p in expected[WEST]) == 16

    entries = s.services.reconciler.run_once().proposals
    assert [(e["sku"], e["region"], e["region_reason"]) for e in entries] == [
        (SKU, EAST, "most_used_region"),
        (SKU, WEST, "used_region"),
    ]
    for e in entries:
        assert e["proposed"] == [
            {"units": p.units, "start_s": p.start_s, "term_months": p.term_months, "reason": p.reason}
            for p in expected[e["region"]]
        ]
        assert e["created"] and "planned_runs_not_read" not in e
    assert entries[0]["context"]["use_read"] == {"own_region": False, "excluded_regions": [WEST]}
    assert entries[1]["context"]["use_read"] == {"own_region": True, "excluded_regions": []}
    with s.client("viewer", "vic") as vic:
        held = {r["reservation_id"]: r for r in vic.get("/v1/reservations").json()}
    assert {(r["region"], r["pool"]) for r in held.values()} == {(EAST, f"aws/{EAST}/{SKU}/reserved"),
                                                                  (WEST, f"aws/{WEST}/{SKU}/reserved")}  # fmt: skip
    by_region = {e["region"]: sum(held[i]["units"] for i in e["created"]) for e in entries}
    assert by_region == {EAST: 32, WEST: 16}  # 48 GPUs in all: the fleet's use, none of it bought twice

    # the same rule on request reads the same plan: what the pass ordered is held, nothing is proposed twice
    with s.client("finops_admin", "fay") as fay:
        again = fay.post("/v1/plans:propose", json={"sku": SKU, "region": WEST})
        assert again.status_code == 200, again.text
        body = again.json()
        assert body["created"] == [] and body["context"]["committed_gpus_at_lead"] == 16
        assert body["context"]["use_read"] == {"own_region": True, "excluded_regions": []}


def test_a_region_where_nothing_of_the_sku_is_planned_is_refused_by_name(
    database: Database, make_server: ServerFactory
) -> None:
    """A reserved pool in a region with no use of the SKU and no run: planning it would buy the use the other
    regions plan (before regions were split, ``plans:propose`` there read the SKU's whole use)."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as bob:
        pool = {"id": f"aws/{WEST}/{SKU}/reserved", "provider_id": "aws", "region_id": WEST, "sku_id": SKU,
                "tier": "reserved", "price_usd_per_gpu_h": "4.3619", "term_months": 12}  # fmt: skip
        assert bob.post("/v1/pools", json=pool).status_code == 201
        records = _hours(24, f"aws/{EAST}/{SKU}/on_demand", "dcgm-east")
        assert bob.post("/v1/utilization:ingest", json={"records": records}).status_code == 200
    with s.client("finops_admin", "fay") as fay:
        r = fay.post("/v1/plans:propose", json={"sku": SKU, "region": WEST})
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["field"] == "region" and EAST in r.json()["detail"], r.json()
        with s.client("viewer", "vic") as vic:
            assert vic.get("/v1/reservations").json() == []  # nothing was ordered
        ok = fay.post("/v1/plans:propose", json={"sku": SKU, "region": EAST})  # the main region reads it all
        assert ok.status_code == 200 and ok.json()["context"]["use_read"]["excluded_regions"] == []
    (entry,) = s.services.reconciler.run_once().proposals
    assert entry["region"] == EAST and entry["created"] == []  # the request's orders are held: none again


def test_the_quota_outlook_checks_each_pool_against_its_plans_use(
    database: Database, make_server: ServerFactory
) -> None:
    """Quotas are regional: with the SKU planned in two regions, the west's on-demand pool (quota 8) is checked
    against the west's 16 GPUs, and the east's (quota 40) against the 32 the east plans, not both against the 48
    of the whole fleet (which would draft an increase in every region for the fleet's whole spill-over)."""
    s = make_server(database)
    _two_regions(s)
    with s.client("ml_platform_admin", "bob") as bob:
        assert bob.patch(f"/v1/pools/aws/{EAST}/{SKU}/on_demand", json={"quota_gpus": 40}).status_code == 200
    with s.client("viewer", "vic") as vic:
        r = vic.get("/v1/quotas/outlook", params={"sku": SKU, "days": 30})
        assert r.status_code == 200, r.text
        pools = {p["pool"]: p for p in r.json()["pools"]}
    east, west = pools[f"aws/{EAST}/{SKU}/on_demand"], pools[f"aws/{WEST}/{SKU}/on_demand"]
    assert (east["plan_region"], west["plan_region"]) == (EAST, WEST)
    assert east["peak_demand_gpus"] == pytest.approx(32, abs=0.5) and east["exhausts_at_s"] is None
    assert west["peak_demand_gpus"] == pytest.approx(16, abs=0.5) and west["exhausts_at_s"] == NOW_S
    # the secondary provider's pool is in a region no other plan reads: the main plan's
    (secondary,) = [p for p in pools.values() if p["tier"] == "secondary"]
    assert secondary["plan_region"] == EAST
    with s.client("viewer", "vic") as vic:  # a SKU planned in one region (or none) reads its whole use
        others = vic.get("/v1/quotas/outlook", params={"sku": "a100_80gb", "days": 30}).json()["pools"]
    assert others and all(p["plan_region"] is None for p in others)


def test_the_plan_map_is_readable_before_the_pass(database: Database, make_server: ServerFactory) -> None:
    """``GET /v1/plans/regions``: where today's pass will plan the SKU, which records each plan reads and how much
    of the use names no region; admins and viewers read it, an app_team token does not, a bad SKU is a 422."""
    s = make_server(database)
    _two_regions(s)
    with s.client("viewer", "vic") as vic, s.client("app_team", "ann", "team-r") as ann:
        r = vic.get("/v1/plans/regions", params={"sku": SKU})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["now_s"] == NOW_S and body["lookback_days"] == 28
        (view,) = body["skus"]
        assert [(p["region"], p["reason"], p["own_region"], p["excluded_regions"]) for p in view["plans"]] == [
            (EAST, "most_used_region", False, [WEST]),
            (WEST, "used_region", True, []),
        ]
        hours = 28 * 24
        assert view["used_gpu_h_by_region"] == {EAST: 24 * hours, WEST: 16 * hours}
        assert view["unattributed_gpu_h"] == 8 * hours and view["planned_runs_not_read"] == []
        assert [v["sku"] for v in vic.get("/v1/plans/regions").json()["skus"]] == [SKU]  # the only SKU in use
        bad = vic.get("/v1/plans/regions", params={"sku": "nope_sku"})
        assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
        assert bad.json()["field"] == "sku", bad.json()
        denied = ann.get("/v1/plans/regions")
        assert denied.status_code == 403 and denied.headers["content-type"].startswith("application/problem+json")


def test_a_regions_late_telemetry_fills_only_its_own_plan(database: Database, make_server: ServerFactory) -> None:
    """The west's source has not delivered the day's last hour yet (its watermark is 23:00); the east's has. The
    west's plan fills that hour from the day before (service/late_hours.py); the east's reads its hours as they are,
    where a watermark over the SKU's records would have filled the east too."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as bob:
        for tier, extra in (("reserved", {"term_months": 12, "lead_time_s": 14 * DAY}), ("on_demand", {})):
            pool = {"id": f"aws/{WEST}/{SKU}/{tier}", "provider_id": "aws", "region_id": WEST, "sku_id": SKU,
                    "tier": tier, "price_usd_per_gpu_h": "4.3619" if tier == "reserved" else "6.88", **extra}  # fmt: skip
            assert bob.post("/v1/pools", json=pool).status_code == 201
        west = _hours(16, f"aws/{WEST}/{SKU}/on_demand", "dcgm-west")[:-1]  # 23:00-24:00 not in yet
        records = _hours(24, f"aws/{EAST}/{SKU}/on_demand", "dcgm-east") + west
        assert bob.post("/v1/utilization:ingest", json={"records": records}).status_code == 200
    entries = {e["region"]: e for e in s.services.reconciler.run_once().proposals}
    assert entries[EAST]["context"]["late_hours_filled"] == 0
    assert entries[WEST]["context"]["late_hours_filled"] == 1
    procurement = s.services.procurement
    assert procurement.late_hours(SKU, NOW_S) == 1  # over every record of the SKU: the west's hour counts
