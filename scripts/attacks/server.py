"""Issue 17 items 5, 6, 9, 12, 13, 19, 20 replayed over HTTP: a team's CSV total, anonymous /metrics, oversized
bodies, spreadsheet formulas, security headers and /docs assets, one idle-waste figure, utilization that names
its pool. (Items 7, 8 and 11 need the database itself: tests/integration/test_hardening_db.py.)"""

from __future__ import annotations

import csv
import io
import select
import socket
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any
from urllib.parse import urlparse

from attacks.ctx import Ctx, Result

BUCKET_S = 1800
FORMULAS = ("=", "+", "-", "@", "\t", "\r")
SPOT = "nebius/eu-north1/h100_80gb/spot"


def _workload(team: str, name: str) -> dict[str, Any]:
    return {
        "name": name, "image": "registry.example/llm:1.2", "cpu": 16, "mem_gb": 128, "gpus": 2,
        "gpu_sku": "h100_80gb", "min_replicas": 1, "max_replicas": 4, "scale_metric": "rps", "budget_usd_day": 900,
        "team": team, "tenant": f"{team}-prod", "priority": "normal", "kind": "training",
    }  # fmt: skip


def _records(wid: str, team: str, util: float, pool: str | None = None, n: int = 48) -> list[dict[str, Any]]:
    t0 = (int(time.time()) // BUCKET_S) * BUCKET_S - (n + 1) * BUCKET_S
    out: list[dict[str, Any]] = []
    for i in range(n):
        r: dict[str, Any] = {"source": "atk", "bucket_start_s": t0 + i * BUCKET_S, "bucket_s": BUCKET_S,
                             "workload_id": wid, "team_id": team, "sku_id": "h100_80gb", "gpus_allocated": 2.0,
                             "gpu_util": util}  # fmt: skip
        if pool:
            r["pool_id"] = pool
        out.append(r)
    return out


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _setup(ctx: Ctx) -> dict[str, str]:
    """Two teams with a workload each and two days of utilization; one workload named like a formula."""
    wids: dict[str, str] = {}
    with ctx.client("ml_platform_admin", user="atk-admin") as admin:
        for team in ("atk-a", "atk-b"):
            admin.post("/v1/teams", json={"id": team, "name": team})
            admin.post("/v1/tenants", json={"id": f"{team}-prod", "name": "prod", "team_id": team})
        for team, name, util in (("atk-a", '=HYPERLINK("http://evil.example","x")', 0.5), ("atk-b", "b-llm", 0.1)):
            with ctx.client("app_team", team=team, user=f"{team}-dev") as dev:
                r = dev.post("/v1/workloads", json=_workload(team, name))
                if r.status_code != 201:
                    raise RuntimeError(f"setup: workload for {team}: {r.status_code} {r.text[:200]}")
                wids[team] = r.json()["workload_id"]
            got = admin.post("/v1/utilization:ingest", json={"records": _records(wids[team], team, util)})
            if got.status_code != 200:
                raise RuntimeError(f"setup: ingest: {got.status_code} {got.text[:200]}")
    return wids


def _csv_scope(ctx: Ctx) -> Result:  # item 5
    with ctx.client("app_team", team="atk-a", user="atk-a-dev") as a, ctx.client("finops_admin", user="atk-fin") as f:
        fleet_total = _csv(f.get("/ui/api/breakdown.csv", params={"dim": "team"}).text)[-1][-1]
        rows = _csv(a.get("/ui/api/breakdown.csv", params={"dim": "team"}).text)
    own = sum(Decimal(r[-1]) for r in rows[1:-1])
    leaked = any("atk-b" in c for r in rows for c in r)
    held = rows[-1][0] == "TOTAL" and Decimal(rows[-1][-1]) == own and not leaked
    return Result("team CSV shows the team's total, not the fleet's", held, f"team {own}, fleet {fleet_total}")


def _metrics(ctx: Ctx) -> Result:  # item 6
    with ctx.anonymous() as anon, ctx.client("app_team", team="atk-a", user="atk-a-dev") as a:
        codes = (anon.get("/metrics").status_code, a.get("/metrics").status_code)
    return Result("/metrics refuses anonymous and app-team callers", codes == (401, 403), f"codes {codes}")


def _raw(ctx: Ctx, head: bytes, chunks: Iterable[bytes]) -> tuple[int, int]:
    u = urlparse(ctx.base_url)
    sent = 0
    with socket.create_connection((u.hostname, u.port), timeout=30) as sock:
        sock.sendall(head)
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(chunk)
            except OSError:
                break
            sent += len(chunk)
        data = b""
        while b"\r\n" not in data:
            part = sock.recv(65536)
            if not part:
                break
            data += part
    return (int(data.split(b" ", 2)[1]) if data else 0), sent


def _body_limits(ctx: Ctx) -> list[Result]:  # item 9
    host = urlparse(ctx.base_url).netloc.encode()
    auth = b"Authorization: Bearer " + ctx.token("finops_admin", user="atk-fin").encode() + b"\r\n"
    head = (b"POST /v1/reservations HTTP/1.1\r\nHost: " + host + b"\r\n" + auth
            + b"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")  # fmt: skip
    status, _ = _raw(ctx, head, [b"{" + b" " * 65535])
    out = [Result("100 MB JSON body refused with 413 before it is read", status == 413, f"status {status}")]
    head = (b"POST /v1/utilization:ingest HTTP/1.1\r\nHost: " + host + b"\r\n" + auth
            + b"Content-Type: text/csv\r\nTransfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    piece = b"x" * 65536
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    status, sent = _raw(ctx, head, (chunk for _ in range(75 * 16)))
    held = status == 413 and sent < 30 * 1024 * 1024
    out.append(Result("75 MB streamed CSV refused while streaming", held, f"status {status}, {sent >> 20} MiB sent"))
    return out


def _formulas(ctx: Ctx) -> Result:  # item 12
    with ctx.client("finops_admin", user="atk-fin") as f:
        keys = [r[0] for r in _csv(f.get("/ui/api/breakdown.csv", params={"dim": "feature"}).text)]
    bad = [k for k in keys if k.startswith(FORMULAS)]
    shown = any(k.startswith("'=HYPERLINK") for k in keys)
    return Result("no formula cells in breakdown.csv", not bad and shown, f"formula cells {bad}" if bad else "")


def _headers(ctx: Ctx) -> Result:  # item 13
    problems: list[str] = []
    with ctx.client("finops_admin", user="atk-fin") as f:
        for path in ("/v1/teams", "/ui/api/overview", "/healthz"):
            h = f.get(path).headers
            if h.get("x-content-type-options") != "nosniff":
                problems.append(f"{path}: nosniff")
            if "frame-ancestors 'none'" not in h.get("content-security-policy", ""):
                problems.append(f"{path}: frame-ancestors")
            if h.get("cache-control") != "no-store":
                problems.append(f"{path}: no-store")
        docs = f.get("/docs").text
        if "https://" in docs:
            problems.append("/docs loads from another origin")
        if f.get("/docs/static/swagger-ui-bundle.js").status_code != 200:
            problems.append("/docs assets not served locally")
    return Result("security headers, /docs without a CDN", not problems, "; ".join(problems))


def _idle_waste(ctx: Ctx) -> Result:  # item 19
    with ctx.client("finops_admin", user="atk-fin") as f:
        skus = [s["id"] for s in f.get("/v1/skus").json()]
        per_sku = [
            f.get("/v1/fleet/utilization", params={"sku": s, "window": "7d"}).json()["idle_waste_usd"] for s in skus
        ]
        dash = f.get("/ui/api/overview").json()["kpis"].get("idle_waste_usd")
    held = dash is not None and abs(sum(per_sku) - dash) <= 0.01 * len(skus) + 0.01
    return Result("one idle-waste figure (API == dashboard)", held, f"api {sum(per_sku):.2f}, dashboard {dash}")


def _pool(ctx: Ctx, wids: dict[str, str]) -> Result:  # item 20
    with ctx.client("ml_platform_admin", user="atk-admin") as admin:
        wl = admin.post("/v1/workloads", json={**_workload("atk-b", "spot-job")})
        if wl.status_code != 201:
            return Result("utilization names its pool", False, f"workload {wl.status_code}")
        wid = wl.json()["workload_id"]
        got = admin.post("/v1/utilization:ingest", json={"records": _records(wid, "atk-b", 0.9, SPOT)})
        cost = admin.get(f"/v1/workloads/{wid}/cost").json()
        eu = admin.get("/v1/fleet/utilization", params={"sku": "h100_80gb", "region": "eu-north1"}).json()
    held = got.status_code == 200 and set(cost.get("by_tier_usd") or {}) == {"spot"} and eu.get("records", 0) >= 48
    return Result("utilization names its pool; cost and region follow it", held, f"tiers {cost.get('by_tier_usd')}")


def run(ctx: Ctx) -> list[Result]:
    try:
        wids = _setup(ctx)
    except Exception as exc:  # the setup itself failing is a failure to report, not a crash
        return [Result("setup (teams, workloads, utilization)", False, str(exc)[:300])]
    checks: list[Callable[[], Result | list[Result]]] = [
        lambda: _csv_scope(ctx), lambda: _metrics(ctx), lambda: _body_limits(ctx), lambda: _formulas(ctx),
        lambda: _headers(ctx), lambda: _idle_waste(ctx), lambda: _pool(ctx, wids),
    ]  # fmt: skip
    results: list[Result] = []
    for check in checks:
        try:
            got = check()
        except Exception as exc:
            got = Result(getattr(check, "__name__", "check"), False, f"{type(exc).__name__}: {str(exc)[:200]}")
        results += got if isinstance(got, list) else [got]
    return results
