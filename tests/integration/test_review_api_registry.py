"""Review (hostile): registry writes over HTTP on SQLite and PostgreSQL that lose or corrupt data, or answer 500.

Each test states the defect it exposes; each fails on the code as reviewed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

PROBLEM = "application/problem+json"
H100 = "h100_80gb"


def _call(s: LiveServer, method: str, path: str, **kw: Any) -> httpx.Response:
    """One request on its own connection (a 500 makes the server drop a keep-alive connection)."""
    with s.client("ml_platform_admin", "adm") as c:
        return c.request(method, path, **kw)


def _team_with_workload(s: LiveServer) -> str:
    assert _call(s, "POST", "/v1/teams", json={"id": "ta", "name": "A"}).status_code == 201
    assert _call(s, "POST", "/v1/tenants", json={"id": "ta-prod", "name": "p", "team_id": "ta"}).status_code == 201
    r = _call(s, "POST", "/v1/workloads", json={"name": "w", "image": "img", "gpu_sku": H100, "team": "ta", "gpus": 8})
    assert r.status_code == 201, r.text
    return str(r.json()["workload_id"])


def test_deleting_a_pool_rewrites_the_past_costs_charged_to_it(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: utilization records name the pool they ran in (ingest refuses an unknown pool id),
    but ``DELETE /v1/pools/{id}`` does not check them (no FK, RegistryService.delete relies on IntegrityError only).
    Deleting the pool silently re-prices the workload's PAST cost (charged to another pool now) and drops the records
    from the region's utilization. Expected: 409 while records still reference the pool, books unchanged."""
    s = make_server(database)
    pool = f"aws/us-east-1/{H100}/spot-review"
    r = _call(s, "POST", "/v1/pools", json={"id": pool, "provider_id": "aws", "region_id": "us-east-1",
                                            "sku_id": H100, "tier": "spot", "price_usd_per_gpu_h": "1"})  # fmt: skip
    assert r.status_code == 201, r.text
    wid = _team_with_workload(s)
    recs = [{"source": "k8s", "bucket_start_s": NOW_S - 3600 * (i + 1), "bucket_s": 3600, "workload_id": wid,
             "team_id": "ta", "sku_id": H100, "gpus_allocated": 8.0, "gpu_util": 0.5, "pool_id": pool}
            for i in range(5)]  # fmt: skip
    assert _call(s, "POST", "/v1/utilization:ingest", json={"records": recs}).status_code == 200
    cost_before = _call(s, "GET", f"/v1/workloads/{wid}/cost").json()["cost_usd"]
    region_before = _call(s, "GET", "/v1/fleet/utilization", params={"sku": H100, "region": "us-east-1"}).json()
    assert cost_before == pytest.approx(40.0) and region_before["gpu_hours"] == pytest.approx(40.0)

    deleted = _call(s, "DELETE", f"/v1/pools/{pool}")
    cost_after = _call(s, "GET", f"/v1/workloads/{wid}/cost").json()["cost_usd"]
    region_after = _call(s, "GET", "/v1/fleet/utilization", params={"sku": H100, "region": "us-east-1"}).json()
    # what was spent in the past must not change because a registry row was removed
    assert (cost_after, region_after["gpu_hours"]) == (cost_before, region_before["gpu_hours"]), deleted.status_code
    assert deleted.status_code == 409


def test_a_node_update_can_allocate_more_gpus_than_the_node_has(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: ``NodeCreate`` refuses allocations above ``gpus_total`` (422), but ``NodeUpdate``
    (PATCH) has no such validator (schemas.py NodeUpdate) and RegistryService.update checks nothing: a PATCH stores 120
    GPUs allocated on an 8-GPU node (the same workload twice), and binpack then reports 120 of 8 GPUs used."""
    s = make_server(database)
    assert (
        _call(s, "POST", "/v1/clusters", json={"id": "c1", "name": "c1", "region_id": "us-east-1"}).status_code == 201
    )
    node = {"id": "n1", "cluster_id": "c1", "sku_id": H100, "gpus_total": 8}
    too_many = [{"workload_id": "w1", "gpus": 60}, {"workload_id": "w1", "gpus": 60}]
    created = _call(s, "POST", "/v1/nodes", json={**node, "allocations": too_many})
    assert created.status_code == 422  # the create path refuses it
    assert _call(s, "POST", "/v1/nodes", json={**node, "allocations": []}).status_code == 201
    r = _call(s, "PATCH", "/v1/nodes/n1", json={"allocations": too_many})
    stored = _call(s, "GET", "/v1/nodes/n1").json()
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, (r.status_code, r.text)
    assert sum(a["gpus"] for a in stored["allocations"]) <= stored["gpus_total"]


def test_a_pool_that_ever_had_a_signal_can_never_be_deleted(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: ``PUT /v1/placement/signals`` stores a pool_signals row with a FK to the pool, and no
    route deletes it. ``DELETE /v1/pools/{id}`` then answers 409 "still referenced; delete its dependents first"
    forever: there is no dependent the API can delete. Expected: the pool's own signal goes with it (or a way to clear
    it)."""
    s = make_server(database)
    pool = f"aws/us-east-1/{H100}/od-review"
    r = _call(s, "POST", "/v1/pools", json={"id": pool, "provider_id": "aws", "region_id": "us-east-1",
                                            "sku_id": H100, "tier": "on_demand", "price_usd_per_gpu_h": "2"})  # fmt: skip
    assert r.status_code == 201
    assert _call(s, "PUT", "/v1/placement/signals", json={"pool": pool, "stockout": True}).status_code == 200
    assert _call(s, "PUT", "/v1/placement/signals", json={"pool": pool, "stockout": False}).status_code == 200
    r = _call(s, "DELETE", f"/v1/pools/{pool}")
    assert r.status_code == 204, r.text


# Values the request schemas accept, which PostgreSQL's columns cannot hold (SQLite stores them): the schema's
# bounds (types.py Name = 200 chars, Seconds <= 253_402_300_799) are wider than the migration's columns
# (regions.geo VARCHAR(32), skus.interconnect VARCHAR(64), pools.lead_time_s INTEGER).
WIDE = [
    pytest.param(
        "POST", "/v1/regions", {"id": "rg-long", "provider_id": "aws", "geo": "g" * 33}, "geo", id="region.geo"
    ),
    pytest.param(
        "POST",
        "/v1/skus",
        {
            "id": "skux",
            "name": "x",
            "memory_gb": 80,
            "cpu_per_node": 96,
            "mem_gb_per_node": 1000,
            "interconnect": "i" * 65,
            "relative_throughput": 1.0,
        },
        "interconnect",
        id="sku.interconnect",
    ),
    pytest.param(
        "POST",
        "/v1/pools",
        {
            "id": "aws/us-east-1/h100_80gb/od-lt",
            "provider_id": "aws",
            "region_id": "us-east-1",
            "sku_id": H100,
            "tier": "on_demand",
            "price_usd_per_gpu_h": "1",
            "lead_time_s": 2**31,
        },
        "lead_time_s",
        id="pool.lead_time_s",
    ),
    pytest.param(
        "PATCH",
        f"/v1/pools/aws/us-east-1/{H100}/on_demand",
        {"lead_time_s": 2**31},
        "lead_time_s",
        id="pool.patch.lead_time_s",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), WIDE)
def test_values_the_schema_accepts_are_never_a_500(
    database: Database, make_server: ServerFactory, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    """Review (fixed), the defect: on PostgreSQL these bodies pass validation and then fail in the database (DataError:
    StringDataRightTruncation / NumericValueOutOfRange), which no handler maps: 500 "internal error" with a traceback in
    the log, where SQLite stores the value. Expected: the same answer on both backends, never a 500; if refused, a 422
    problem+json naming the field."""
    s = make_server(database)
    r = _call(s, method, path, json=body)
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code >= 400:
        assert r.headers["content-type"] == PROBLEM and r.json()["field"] == field
