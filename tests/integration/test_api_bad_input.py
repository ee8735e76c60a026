"""Malformed requests over HTTP against the served app (API + dashboard), on SQLite and PostgreSQL: a 4xx
problem+json that names the field, and nothing stored changes. Each case here was unclear or wrong before
(a ``[1]`` field for bad JSON, a 400 without a field for non-UTF-8 bytes, "Input should be a valid dictionary"
for a text/plain body, "Unprocessable Content" for a bad dashboard dimension, a 200 "queue" for a misspelt
region, a reservation of 1 unit from ``"units": true``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, LiveServer
from tests.integration.finops_server import _workload, start_full

PROBLEM = "application/problem+json"
DAY = 86_400


@pytest.fixture
def server(database: Database) -> Iterator[LiveServer]:
    s = start_full(database, FixedClock(NOW_S))
    with s.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/teams", json={"id": "team-a", "name": "A"}).status_code == 201
        assert c.post("/v1/tenants", json={"id": "team-a-prod", "name": "p", "team_id": "team-a"}).status_code == 201
    yield s
    s.stop()


def _problem(r: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["field"] == field, body
    assert body["detail"].startswith(f"{field}: ")
    return body


def test_bodies_that_are_not_json_name_the_body_or_the_content_type(server: LiveServer) -> None:
    with server.client("ml_platform_admin", "bob") as c:
        for path in ("/v1/teams", "/v1/workloads", "/v1/placement/recommendations"):
            bad = _problem(
                c.post(path, content=b'{"id": "x",}', headers={"content-type": "application/json"}), 422, "body"
            )
            assert "invalid JSON at character 11" in bad["detail"]
            latin1 = c.post(
                path, content='{"id": "caf\xe9"}'.encode("latin-1"), headers={"content-type": "application/json"}
            )
            assert "UTF-8" in _problem(latin1, 400, "body")["detail"]
            plain = c.post(path, content=b'{"id": "x"}', headers={"content-type": "text/plain"})
            assert "application/json" in _problem(plain, 415, "content-type")["detail"]
        json_ct = {"content-type": "application/json"}
        deep = c.post("/v1/teams", content=b"[" * 100_000 + b"]" * 100_000, headers=json_ct)
        assert "nested too deeply" in _problem(deep, 400, "body")["detail"]
        long_int = c.post("/v1/teams", content=b'{"id": "t9", "name": "x", "n": ' + b"9" * 5000 + b"}", headers=json_ct)
        assert "not valid JSON" in _problem(long_int, 400, "body")["detail"]
        assert [t["id"] for t in c.get("/v1/teams").json()] == ["team-a"]  # nothing was created


def test_a_bad_dashboard_dimension_names_dim(server: LiveServer) -> None:
    with server.client("finops_admin", "alice") as c:
        for path in ("/ui/api/breakdown", "/ui/api/breakdown.csv"):
            assert "tenant" in _problem(c.get(path, params={"dim": "bogus"}), 422, "dim")["detail"]


def test_a_misspelt_region_is_refused_and_a_real_one_still_places(server: LiveServer) -> None:
    req = {"job_class": "training", "priority": "normal", "sku": "h100_80gb", "gpus": 8}
    with server.client("ml_platform_admin", "bob") as c:
        bad = c.post("/v1/placement/recommendations", json={**req, "regions": ["us-east-1", "us-esat-1"]})
        assert "us-esat-1" in _problem(bad, 422, "regions[1]")["detail"]
        ok = c.post("/v1/placement/recommendations", json={**req, "regions": ["us-east-1"]})
        assert ok.status_code == 200 and ok.json()["region"] in ("us-east-1", None), ok.text


def test_a_boolean_or_a_string_is_not_a_count(server: LiveServer) -> None:
    body = {"sku": "h100_80gb", "start": "2026-03-01T00:00:00Z", "term_months": 12, "regions": ["us-east-1"]}
    with server.client("ml_platform_admin", "bob") as c:
        for units in (True, "8", 8.5):
            _problem(c.post("/v1/reservations", json={**body, "units": units}), 422, "units")
        assert c.get("/v1/reservations").json() == []
        assert c.post("/v1/reservations", json={**body, "units": 8}).status_code == 201
    wl = _workload("team-a", 1)
    with server.client("ml_platform_admin", "bob") as c:
        for field in ("gpus", "min_replicas", "max_replicas"):
            for bad in (True, "1", 1.5):
                _problem(c.post("/v1/workloads", json={**wl, field: bad}), 422, field)
        assert c.get("/v1/workloads").json() == []
        place = {"job_class": "serving", "priority": "normal", "sku": "h100_80gb"}
        for field in ("gpus", "replicas"):
            _problem(c.post("/v1/placement/recommendations", json={**place, field: "2"}), 422, field)
        assert c.post("/v1/workloads", json=wl).status_code == 201


def test_refused_updates_leave_the_stored_budget_and_autoscaling_as_they_were(server: LiveServer) -> None:
    wl = {"name": "llm", "image": "r/llm:1", "cpu": 4, "mem_gb": 16, "gpus": 1, "gpu_sku": "h100_80gb",
          "min_replicas": 1, "max_replicas": 4, "scale_metric": "rps", "team": "team-a", "tenant": "team-a-prod",
          "priority": "normal"}  # fmt: skip
    with server.client("ml_platform_admin", "bob") as c, server.client("finops_admin", "alice") as fin:
        assert fin.put("/v1/teams/team-a/budget", json={"limit_usd": 1000, "period": "month"}).status_code == 200
        before = fin.get("/v1/teams/team-a/budget").json()
        for body in ({"limit_usd": -1}, {"limit_usd": "NaN"}, {"limit_usd": "1e400"}, {"limit_usd": 5, "period": "x"}):
            assert fin.put("/v1/teams/team-a/budget", json=body).status_code == 422
        assert (
            fin.put("/v1/teams/team-a/budget", content=b"{", headers={"content-type": "application/json"}).status_code
            == 422
        )
        assert fin.get("/v1/teams/team-a/budget").json() == before

        wid = c.post("/v1/workloads", json=wl).json()["workload_id"]
        path = f"/v1/workloads/{wid}/autoscaling"
        assert c.put(path, json={"min": 1, "max": 3, "target_rps": 10}).status_code == 200
        kept = c.get(f"/v1/workloads/{wid}").json()
        _problem(c.put(path, json={"min": 5, "max": 2, "target_rps": 10}), 422, "max")
        _problem(c.put(path, json={"min": 1, "max": 2, "target_rps": "Infinity"}), 422, "target_rps")
        assert c.put(path, json={"min": 1, "max": 2, "target_rps": 1, "version": 999}).status_code == 409
        for bad, field in (({"slo_s": 0}, "slo_s"), ({"slo_s": "NaN"}, "slo_s"), ({"max_concurrency": 0}, "max_concurrency"),
                           ({"max_concurrency": True}, "max_concurrency"), ({"max_concurrency": 1.5}, "max_concurrency")):  # fmt: skip
            _problem(c.put(path, json={"min": 1, "max": 3, "target_rps": 10, **bad}), 422, field)
        assert c.get(f"/v1/workloads/{wid}").json() == kept
        decide = f"{path}/decision"
        _problem(c.get(decide, params={"rps": [1, 2], "slo_misses": [0]}), 422, "slo_misses")
        _problem(c.get(decide, params={"rps": [1], "peak_in_flight": [1, 2]}), 422, "peak_in_flight")
        _problem(c.get(decide, params={"rps": [1], "slo_misses": [-1]}), 422, "slo_misses[0]")


def test_a_refused_ingest_batch_stores_none_of_its_records(server: LiveServer, database: Database) -> None:
    def rec(i: int, **over: Any) -> dict[str, Any]:
        return {"source": "dcgm", "bucket_start_s": NOW_S - DAY + i * 3600, "bucket_s": 3600, "workload_id": "w1",
                "team_id": "team-a", "sku_id": "h100_80gb", "gpus_allocated": 8, "gpu_util": 0.5, **over}  # fmt: skip

    def stored() -> int:
        with database.engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM utilization")).scalar_one())

    with server.client("ml_platform_admin", "bob") as c:
        for last in (rec(9, gpu_util=2), rec(9, sku_id="nosuch"), rec(9, bucket_start_s=-1)):
            r = c.post("/v1/utilization:ingest", json={"records": [rec(i) for i in range(9)] + [last]})
            assert r.status_code == 422 and r.json()["field"].startswith("records[9]."), r.text
        assert stored() == 0
        csv_text = "source,bucket_start_s,bucket_s,workload_id,team_id,sku_id,gpus_allocated,gpu_util\n"
        csv_text += f"dcgm,{NOW_S - DAY},3600,w1,team-a,h100_80gb,8,0.5\ndcgm,{NOW_S},3600,w1,team-a,h100_80gb,8,abc\n"
        r = c.post("/v1/utilization:ingest", content=csv_text, headers={"content-type": "text/csv"})
        assert r.status_code == 422 and "line 3" in r.json()["detail"], r.text
        assert stored() == 0
        xml = c.post("/v1/utilization:ingest", content=b"<records/>", headers={"content-type": "application/xml"})
        assert "text/csv" in _problem(xml, 415, "content-type")["detail"]  # the same status as the JSON routes
        assert stored() == 0
        assert c.post("/v1/utilization:ingest", json={"records": [rec(0)]}).status_code == 200
        assert stored() == 1


def test_a_reservation_start_more_than_ten_years_ahead_is_refused(server: LiveServer) -> None:
    body = {"sku": "h100_80gb", "units": 8, "term_months": 12, "regions": ["us-east-1"]}
    with server.client("ml_platform_admin", "bob") as c:  # the service clock is 2026-01-01
        for start in ("9999-01-01T00:00:00Z", "2036-01-02T00:00:00Z"):
            bad = _problem(c.post("/v1/reservations", json={**body, "start": start}), 422, "start")
            assert "3650 days" in bad["detail"], bad
        assert c.get("/v1/reservations").json() == []
        ok = c.post("/v1/reservations", json={**body, "start": "2035-12-01T00:00:00Z"})
        assert ok.status_code == 201, ok.text
