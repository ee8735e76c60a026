"""Every endpoint driven over HTTP against a live server, on SQLite and on PostgreSQL.

The tests of this module share one server per backend and use distinct ids, so they do not interfere.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.integration.conftest import NOW_S, LiveServer

DAY = 86400
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def server(shared_server: LiveServer) -> LiveServer:
    """Teams, tenants, a cluster with nodes, and two workloads with a week of utilization."""
    s = shared_server
    with s.client("ml_platform_admin", "bob") as c:
        for team in ("team-a", "team-b"):
            assert c.post("/v1/teams", json={"id": team, "name": team.upper()}).status_code == 201
            assert (
                c.post("/v1/tenants", json={"id": f"{team}-prod", "name": "prod", "team_id": team}).status_code == 201
            )
    return s


def _workload(team: str, **over: Any) -> dict[str, Any]:
    body = {
        "name": f"{team}-llm",
        "image": "registry.example/llm:1.2",
        "cpu": 16,
        "mem_gb": 128,
        "gpus": 2,
        "gpu_sku": "h100_80gb",
        "min_replicas": 1,
        "max_replicas": 4,
        "scale_metric": "rps",
        "budget_usd_day": 900,
        "team": team,
        "tenant": f"{team}-prod",
        "priority": "critical",
    }
    body.update(over)
    return body


def _records(workload_id: str, team: str, days: int, gpus: float, util: float) -> list[dict[str, Any]]:
    return [
        {
            "source": "dcgm",
            "bucket_start_s": NOW_S - days * DAY + h * 3600,
            "bucket_s": 3600,
            "workload_id": workload_id,
            "team_id": team,
            "sku_id": "h100_80gb",
            "gpus_allocated": gpus,
            "gpu_util": util,
            "queue_wait_s": 30.0 + (h % 10),
        }
        for h in range(days * 24)
    ]


def test_health_and_readiness(server: LiveServer) -> None:
    with server.client() as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz").json()
        assert ready["status"] == "ready" and ready["schema_revision"]
        assert c.get("/openapi.json").status_code == 200
        assert c.get("/docs").status_code == 200


def test_unknown_route_and_method_are_problems(server: LiveServer) -> None:
    with server.client("viewer", "vic") as c:
        r = c.get("/v1/nope")
        assert r.status_code == 404 and r.headers["content-type"] == PROBLEM and r.json()["status"] == 404
        r = c.delete("/v1/audit")
        assert r.status_code == 405 and r.headers["content-type"] == PROBLEM


def test_missing_and_bad_tokens_get_401_problems(server: LiveServer) -> None:
    with server.client() as c:
        r = c.get("/v1/skus")
        assert r.status_code == 401 and r.headers["content-type"] == PROBLEM
        assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/skus", headers={"Authorization": "Bearer gft_forged"}).status_code == 401


def test_registries_crud(server: LiveServer) -> None:
    with server.client("ml_platform_admin", "bob") as c, server.client("viewer", "vic") as v:
        assert {s["id"] for s in v.get("/v1/skus").json()} >= {"h100_80gb", "b200"}
        assert v.get("/v1/providers/aws").json()["kind"] == "hyperscaler"
        assert v.get("/v1/regions/us-east-1").json()["provider_id"] == "aws"
        sku = {
            "id": "mi300x",
            "name": "AMD MI300X",
            "memory_gb": 192,
            "cpu_per_node": 192,
            "mem_gb_per_node": 2048,
            "interconnect": "xgmi",
            "relative_throughput": 1.1,
        }
        assert c.post("/v1/skus", json=sku).status_code == 201
        assert c.post("/v1/skus", json=sku).status_code == 409
        assert c.post("/v1/providers", json={"id": "owned", "name": "Our DC", "kind": "owned"}).status_code == 201
        assert c.post("/v1/regions", json={"id": "dc-1", "provider_id": "owned", "geo": "eu"}).status_code == 201
        bad_ref = c.post("/v1/regions", json={"id": "dc-2", "provider_id": "nobody", "geo": "eu"})
        assert bad_ref.status_code == 422 and bad_ref.json()["field"] == "provider_id"
        pool = {
            "id": "owned/dc-1/mi300x/reserved",
            "provider_id": "owned",
            "region_id": "dc-1",
            "sku_id": "mi300x",
            "tier": "reserved",
            "price_usd_per_gpu_h": "2.10",
            "term_months": 36,
            "quota_gpus": 64,
        }
        created = c.post("/v1/pools", json=pool)
        assert created.status_code == 201 and created.json()["price_usd_per_gpu_h"] == 2.1
        patched = c.patch("/v1/pools/owned/dc-1/mi300x/reserved", json={"allocated_gpus": 16})
        assert patched.json()["allocated_gpus"] == 16 and patched.json()["quota_gpus"] == 64
        assert [p["id"] for p in v.get("/v1/pools", params={"sku_id": "mi300x"}).json()] == [pool["id"]]
        assert v.get("/v1/pools/owned/dc-1/mi300x/reserved").json()["tier"] == "reserved"
        assert c.delete("/v1/skus/mi300x").status_code == 409  # still referenced by the pool
        assert c.delete("/v1/pools/owned/dc-1/mi300x/reserved").status_code == 204
        assert c.delete("/v1/skus/mi300x").status_code == 204
        assert v.get("/v1/skus/mi300x").status_code == 404
        assert (
            c.post("/v1/clusters", json={"id": "c-east", "name": "east", "region_id": "us-east-1"}).status_code == 201
        )
        assert v.get("/v1/clusters/c-east").json()["region_id"] == "us-east-1"
        node = {
            "id": "n-1",
            "cluster_id": "c-east",
            "sku_id": "h100_80gb",
            "gpus_total": 8,
            "allocations": [{"workload_id": "wl-x", "gpus": 2}],
        }
        assert c.post("/v1/nodes", json=node).status_code == 201
        assert c.patch("/v1/nodes/n-1", json={"allocations": []}).json()["allocations"] == []
        assert [n["id"] for n in v.get("/v1/nodes", params={"cluster_id": "c-east"}).json()] == ["n-1"]
        assert c.delete("/v1/nodes/n-1").status_code == 204
        assert [t["id"] for t in v.get("/v1/tenants", params={"team_id": "team-a"}).json()] == ["team-a-prod"]
        assert v.get("/v1/teams/team-b").json()["name"] == "TEAM-B"
        assert v.post("/v1/teams", json={"id": "x", "name": "x"}).status_code == 403
        unknown_field = c.post("/v1/teams", json={"id": "t9", "name": "n", "colour": "red"})
        assert unknown_field.status_code == 422 and unknown_field.json()["field"] == "colour"


def test_workloads_autoscaling_cost_and_rightsizing(server: LiveServer) -> None:
    with server.client("app_team", "ann", team="team-a") as a, server.client("ml_platform_admin", "bob") as admin:
        r = a.post("/v1/workloads", json=_workload("team-a"))
        assert r.status_code == 201
        wid = r.json()["workload_id"]
        assert wid.startswith("wl_")
        assert a.get(f"/v1/workloads/{wid}").json()["team"] == "team-a"
        assert [w["workload_id"] for w in a.get("/v1/workloads").json()] == [wid]
        # autoscaling with optimistic concurrency
        ok = a.put(f"/v1/workloads/{wid}/autoscaling", json={"min": 2, "max": 6, "target_rps": 40, "version": 1})
        assert ok.status_code == 200 and ok.json()["version"] == 2
        stale = a.put(f"/v1/workloads/{wid}/autoscaling", json={"min": 1, "max": 2, "target_rps": 40, "version": 1})
        assert stale.status_code == 409 and stale.headers["content-type"] == PROBLEM
        via_header = a.put(
            f"/v1/workloads/{wid}/autoscaling", json={"min": 1, "max": 3, "target_rps": 50}, headers={"If-Match": '"2"'}
        )
        assert via_header.json()["version"] == 3
        inverted = a.put(f"/v1/workloads/{wid}/autoscaling", json={"min": 5, "max": 1, "target_rps": 1})
        assert inverted.status_code == 422 and inverted.json()["field"] == "max"
        # a week of 4 GPUs at 25 % busy
        ing = admin.post("/v1/utilization:ingest", json={"records": _records(wid, "team-a", 7, 4.0, 0.25)})
        assert ing.json() == {"received": 168, "inserted": 168, "updated": 0}
        cost = a.get(f"/v1/workloads/{wid}/cost", params={"window": "7d"}).json()
        assert cost["cost_usd"] == pytest.approx(4 * 168 * 6.88, abs=0.01)
        assert cost["idle_pct"] == pytest.approx(0.75)
        assert cost["rightsizing"]["recommended_gpus"] == 2 and cost["rightsizing"]["reason"] == "overprovisioned"
        bad_window = a.get(f"/v1/workloads/{wid}/cost", params={"window": "7 days"})
        assert bad_window.status_code == 422 and bad_window.json()["field"] == "window"
        chg = a.post(f"/v1/workloads/{wid}/rightsizing:apply", json={"cpu": 8, "mem_gb": 64, "ticket": "OPS-1"})
        assert chg.status_code == 202 and chg.json()["change_id"].startswith("chg_")
        bad = a.post("/v1/workloads", json=_workload("team-a", gpu_sku="tpu_v9"))
        assert bad.status_code == 422 and bad.json()["field"] == "gpu_sku"
        doomed = a.post("/v1/workloads", json=_workload("team-a", name="tmp")).json()["workload_id"]
        assert a.delete(f"/v1/workloads/{doomed}").status_code == 204
        assert a.get(f"/v1/workloads/{doomed}").status_code == 404


def test_app_team_cannot_read_another_teams_workload_or_cost(server: LiveServer) -> None:
    with server.client("app_team", "ann", team="team-a") as a, server.client("app_team", "ben", team="team-b") as b:
        wid_b = b.post("/v1/workloads", json=_workload("team-b")).json()["workload_id"]
        # Another team's workload by id answers exactly as an id that does not exist: no owner, no existence leak.
        for path in (f"/v1/workloads/{wid_b}", f"/v1/workloads/{wid_b}/cost"):
            r, missing = a.get(path), a.get(path.replace(wid_b, "wl_missing"))
            assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
            assert "team-b" not in r.text
            assert r.json()["detail"] == missing.json()["detail"].replace("wl_missing", wid_b)
        assert (
            a.put(f"/v1/workloads/{wid_b}/autoscaling", json={"min": 0, "max": 1, "target_rps": 1}).status_code == 404
        )
        assert a.get("/v1/workloads", params={"team": "team-b"}).status_code == 403  # naming the team: 403
        assert a.delete(f"/v1/workloads/{wid_b}").status_code == 404
        assert b.get(f"/v1/workloads/{wid_b}").status_code == 200  # untouched
        assert wid_b not in [w["workload_id"] for w in a.get("/v1/workloads").json()]
        assert a.post("/v1/workloads", json=_workload("team-b")).status_code == 403
        assert a.get("/v1/fleet/utilization", params={"sku": "h100_80gb"}).status_code == 403
        assert a.get("/v1/audit").status_code == 403


def test_ingestion_is_idempotent_for_json_and_csv(server: LiveServer) -> None:
    recs = _records("wl-ingest", "team-a", 2, 2.0, 0.5)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(recs[0]))
    w.writeheader()
    w.writerows(recs)
    with server.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/utilization:ingest", json={"records": recs}).json()["inserted"] == 48
        again = c.post("/v1/utilization:ingest", content=buf.getvalue(), headers={"Content-Type": "text/csv"})
        assert again.json() == {"received": 48, "inserted": 0, "updated": 48}
        bad = c.post("/v1/utilization:ingest", json={"records": [{**recs[0], "gpu_util": 1.5}]})
        assert bad.status_code == 422 and bad.json()["field"] == "records[0].gpu_util"
        unknown = c.post("/v1/utilization:ingest", json={"records": [{**recs[0], "sku_id": "nope"}]})
        assert unknown.status_code == 422 and unknown.json()["field"] == "records[0].sku_id"


def test_fleet_utilization_forecast_placement_and_binpack(server: LiveServer) -> None:
    with server.client("ml_platform_admin", "bob") as c, server.client("viewer", "vic") as v:
        c.post("/v1/utilization:ingest", json={"records": _records("wl-fleet", "team-b", 28, 8.0, 0.5)})
        util = v.get("/v1/fleet/utilization", params={"sku": "h100_80gb", "window": "7d"}).json()
        assert 0 < util["avg_util"] < 1 and util["p95_queue_wait_sec"] is not None and util["idle_waste_usd"] > 0
        assert v.get("/v1/fleet/utilization", params={"sku": "h100_80gb", "window": "0d"}).json()["field"] == "window"
        unknown = v.get("/v1/fleet/utilization", params={"sku": "zz9"})
        assert unknown.status_code == 422 and unknown.json()["field"] == "sku"

        fc = v.get("/v1/capacity/forecast", params={"sku": "h100_80gb", "days": 90}).json()
        assert len(fc["demand"]) == 90 and len(fc["supply"]) == 90
        assert fc["demand"][0]["p10"] <= fc["demand"][0]["p50"] <= fc["demand"][0]["p90"]
        assert fc["gap_units"] >= 8 and fc["confidence"] is not None
        assert v.get("/v1/capacity/forecast", params={"sku": "h100_80gb", "days": 0}).json()["field"] == "days"

        body = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 16, "checkpointable": True}
        rec = v.post("/v1/placement/recommendations", json=body).json()
        # no active reservation yet: reserved is skipped; checkpointed training takes spot, cheaper than on-demand
        assert rec["pool"] == "nebius/eu-north1/h100_80gb/spot" and rec["region"] == "eu-north1"
        assert rec["skipped"][0]["trigger"] == "quota_headroom" and rec["action"] == "place"
        assert [f["tier"] for f in rec["fallback"]] == ["on_demand", "secondary", None]
        # without checkpoints: unbounded on-demand wins
        rec = v.post("/v1/placement/recommendations", json={**body, "checkpointable": False}).json()
        assert rec["pool"] == "aws/us-east-1/h100_80gb/on_demand" and rec["region"] == "us-east-1"
        assert [f["tier"] for f in rec["fallback"]] == ["secondary", None]
        c.patch("/v1/pools/aws/us-east-1/h100_80gb/on_demand", json={"quota_gpus": 8})
        rec = v.post("/v1/placement/recommendations", json=body).json()
        assert rec["tier"] == "spot"
        serving = v.post("/v1/placement/recommendations", json={**body, "job_class": "serving"}).json()
        assert serving["tier"] == "secondary"
        assert any(s["trigger"] == "serving_never_spot" for s in serving["skipped"])
        low = v.post("/v1/placement/recommendations", json={**body, "priority": "low", "checkpointable": False}).json()
        assert low["pool"] is None and low["reason"] == "queued_no_capacity_signal"
        c.patch("/v1/pools/aws/us-east-1/h100_80gb/on_demand", json={"quota_gpus": None})
        bad = v.post("/v1/placement/recommendations", json={**body, "gpus": 0})
        assert bad.status_code == 422 and bad.json()["field"] == "gpus"

        c.post("/v1/clusters", json={"id": "c-pack", "name": "pack", "region_id": "us-east-1"})
        train = {"kind": "training", "checkpoint_interval_s": 1800, "priority": "normal"}
        w1, w2, w3 = (
            c.post("/v1/workloads", json=_workload("team-b", name=f"train-{k}", **train)).json()["workload_id"]
            for k in range(3)
        )
        for i, allocs in enumerate(([(w1, 6)], [(w2, 2)], [(w3, 3)], [])):
            c.post(
                "/v1/nodes",
                json={
                    "id": f"p-{i}",
                    "cluster_id": "c-pack",
                    "sku_id": "h100_80gb",
                    "gpus_total": 8,
                    "allocations": [{"workload_id": w, "gpus": g} for w, g in allocs],
                },
            )
        pack = v.get("/v1/clusters/c-pack/binpack").json()
        assert pack["fragmentation"] == pytest.approx(13 / 21, abs=1e-4)
        assert pack["nodes_freed"] == ["p-1"] and pack["fragmentation_after"] < pack["fragmentation"]
        assert [(m["workload_id"], m["from_node"], m["to_node"]) for m in pack["suggested_moves"]] == [
            (w2, "p-1", "p-0")
        ]
        assert v.get("/v1/clusters/nowhere/binpack").status_code == 404


def test_reservation_validation_names_the_field(server: LiveServer) -> None:
    ok = {"sku": "h100_80gb", "units": 2, "start": "2026-03-01T00:00:00Z", "term_months": 12, "regions": ["us-east-1"]}
    cases = [
        ({"units": 0}, "units"),
        ({"units": -3}, "units"),
        ({"sku": "h900"}, "sku"),
        ({"regions": ["mars-1"]}, "regions[0]"),
        ({"regions": []}, "regions"),
        ({"start": "2025-12-31T00:00:00Z"}, "start"),
        ({"start": "yesterday"}, "start"),
        ({"term_months": 7}, "term_months"),
        ({"regions": ["eu-north1"]}, "regions[0]"),  # no reserved pool there
    ]
    with server.client("finops_admin", "fiona") as c:
        for change, field in cases:
            r = c.post("/v1/reservations", json={**ok, **change})
            assert r.status_code == 422, (change, r.text)
            assert r.headers["content-type"] == PROBLEM
            assert r.json()["field"] == field, (change, r.json())
        missing = c.post("/v1/reservations", json={k: v for k, v in ok.items() if k != "units"})
        assert missing.json()["field"] == "units"
        assert (
            c.post("/v1/reservations", content=b"{not json", headers={"Content-Type": "application/json"}).status_code
            == 422
        )
        assert c.get("/v1/reservations/res_missing").status_code == 404
        assert c.post("/v1/reservations", json=ok).status_code == 201
    with server.client("app_team", "ann", team="team-a") as a:
        assert a.post("/v1/reservations", json=ok).status_code == 403
        assert a.get("/v1/reservations").status_code == 403


def test_audit_log_is_ordered_and_pages(server: LiveServer) -> None:
    with server.client("ml_platform_admin", "bob") as admin:  # its own events: the test runs alone too
        r = admin.post("/v1/workloads", json=_workload("team-b", name="audited"))
        assert r.status_code == 201, r.text
        wid = r.json()["workload_id"]
        assert (
            admin.post("/v1/utilization:ingest", json={"records": _records(wid, "team-b", 1, 1.0, 0.5)}).status_code
            == 200
        )
    with server.client("finops_admin", "fiona") as c:
        first = c.get("/v1/audit", params={"limit": 3}).json()
        assert len(first) == 3 and [e["id"] for e in first] == sorted(e["id"] for e in first)
        nxt = c.get("/v1/audit", params={"after_id": first[-1]["id"], "limit": 3}).json()
        assert nxt and nxt[0]["id"] > first[-1]["id"]
        assert {e["action"] for e in c.get("/v1/audit", params={"limit": 1000}).json()} >= {
            "team.created",
            "workload.created",
            "utilization.ingested",
        }
