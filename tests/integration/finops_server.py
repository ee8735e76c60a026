"""A live server of the full served app (API + /metrics + the FinOps dashboard), seeded through the API with a
week of utilization riding a partly used reservation. Shared by the FinOps integration and browser tests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import uvicorn

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.cli.cmd_serve import build_app
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, LiveServer, _free_port

DAY = 86_400
BUCKET_S = 1800  # 30-minute buckets: 336 a week, more than rightsizing's one day of samples
WEEK_BUCKETS = 7 * DAY // BUCKET_S


@dataclass
class Seeded:
    server: LiveServer
    wl_a: str  # team-a: 6 GPUs at 50 %
    wl_b: str  # team-b: 1.5 GPUs at 2 % (idle)
    price_res: Decimal  # reserved $/GPU-h
    reservation_id: str


def start_full(db: Database, clock: FixedClock) -> LiveServer:
    services = build_services(
        Settings(db_url=db.url, reconcile_interval_s=0, token_cache_s=0),
        engine=db.engine,
        clock=clock,
        provider=SimulatedProvider(db.engine),
    )
    srv = LiveServer(services)
    config = uvicorn.Config(
        build_app(services=services), host="127.0.0.1", port=_free_port(), log_level="critical", access_log=False
    )
    srv._server = uvicorn.Server(config)
    srv._thread = threading.Thread(target=srv._server.run, daemon=True)
    srv._thread.start()
    deadline = time.monotonic() + 10
    while not srv._server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    srv.base_url = f"http://127.0.0.1:{config.port}"
    return srv


def _workload(team: str, gpus: int, kind: str = "serving", priority: str = "critical") -> dict[str, Any]:
    return {
        "name": f"{team}-llm", "image": "registry.example/llm:1.2", "cpu": 16, "mem_gb": 128, "gpus": gpus,
        "gpu_sku": "h100_80gb", "min_replicas": 1, "max_replicas": 4, "scale_metric": "rps", "budget_usd_day": 900,
        "team": team, "tenant": f"{team}-prod", "priority": priority, "kind": kind,
    }  # fmt: skip


def _records(wid: str, team: str, gpus: float, util: float) -> list[dict[str, Any]]:
    return [
        {"source": "dcgm", "bucket_start_s": NOW_S - 7 * DAY + i * BUCKET_S, "bucket_s": BUCKET_S, "workload_id": wid,
         "team_id": team, "sku_id": "h100_80gb", "gpus_allocated": gpus, "gpu_util": util}
        for i in range(WEEK_BUCKETS)
    ]  # fmt: skip


def seed(db: Database) -> Seeded:
    """8 reserved H100s from 8 days before "now"; team-a holds 6 at 50 %, team-b 1.5 at 2 %: 0.5 GPU idle."""
    clock = FixedClock(NOW_S - 8 * DAY)
    s = start_full(db, clock)
    with s.client("ml_platform_admin", "bob") as admin, s.client("finops_admin", "alice") as fin:
        for team in ("team-a", "team-b"):
            assert admin.post("/v1/teams", json={"id": team, "name": team.upper()}).status_code == 201
            t = admin.post("/v1/tenants", json={"id": f"{team}-prod", "name": "prod", "team_id": team})
            assert t.status_code == 201
        start = datetime.fromtimestamp(NOW_S - 8 * DAY, UTC).isoformat()
        res = fin.post(
            "/v1/reservations",
            json={"sku": "h100_80gb", "units": 8, "start": start, "term_months": 1, "regions": ["us-east-1"]},
        )
        assert res.status_code == 201, res.text
        rid = res.json()["reservation_id"]
        assert admin.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ML-1"}).json()["status"] == (
            "submitted_to_cloud"
        )
        clock.set(NOW_S)
        assert fin.post("/v1/reservations:reconcile").status_code == 200
        got = fin.get(f"/v1/reservations/{rid}").json()
        assert got["status"] == "active", got
        price = Decimal(str(got["price_usd_per_gpu_h"]))
    with s.client("app_team", "ann", team="team-a") as a, s.client("app_team", "ben", team="team-b") as b:
        wl_a = a.post("/v1/workloads", json=_workload("team-a", 8, kind="training", priority="normal"))
        wl_b = b.post("/v1/workloads", json=_workload("team-b", 2))
        wid_a, wid_b = wl_a.json()["workload_id"], wl_b.json()["workload_id"]
    with s.client("ml_platform_admin", "bob") as admin:
        for recs in (_records(wid_a, "team-a", 6.0, 0.5), _records(wid_b, "team-b", 1.5, 0.02)):
            r = admin.post("/v1/utilization:ingest", json={"records": recs})
            assert r.status_code == 200 and r.json()["inserted"] == WEEK_BUCKETS, r.text
    return Seeded(s, wid_a, wid_b, price, rid)
