"""Review: cost reads through the HTTP API over stored utilization that the books must take as it is: two
reservations in one pool, and workloads metered in buckets of different lengths and starts."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters.sql.models import ReservationRow
from gpufleet.service.uow import UnitOfWork
from tests.integration.conftest import NOW_S, Database, ServerFactory

H, DAY = 3600, 86_400
SKU, REGION = "h100_80gb", "us-east-1"
RESV_POOL = f"aws/{REGION}/{SKU}/reserved"


def _reservation(rid: str, units: int) -> ReservationRow:
    return ReservationRow(id=rid, pool_id=RESV_POOL, sku_id=SKU, region_id=REGION, units=units,
                          start_s=NOW_S - 30 * DAY, term_months=12, price_uusd_per_gpu_h=4_361_900, est_cost_cents=1,
                          status="active", approvals_required=1, created_by="bob", created_at_s=NOW_S - 31 * DAY,
                          idempotency_key=f"k-{rid}")  # fmt: skip


def _rec(wid: str, team: str, start_s: int, bucket_s: int, gpus: float, source: str = "dcgm") -> dict[str, Any]:
    return {"source": source, "bucket_start_s": start_s, "bucket_s": bucket_s, "workload_id": wid, "team_id": team,
            "sku_id": SKU, "gpus_allocated": gpus, "gpu_util": 0.5}  # fmt: skip


def _fleet(db: Database, make_server: ServerFactory, reservations: list[tuple[str, int]]) -> Any:
    with UnitOfWork(db.engine, write=True) as uow:
        for rid, units in reservations:
            uow.session.add(_reservation(rid, units))
        uow.commit()
    s = make_server(db)
    with s.client("ml_platform_admin", "bob") as admin:
        for team in ("team-a", "team-b"):
            assert admin.post("/v1/teams", json={"id": team, "name": team}).status_code == 201
            t = admin.post("/v1/tenants", json={"id": f"{team}-prod", "name": "prod", "team_id": team})
            assert t.status_code == 201
    return s


def _workload(client: Any, team: str, gpus: int) -> str:
    body = {"name": f"{team}-job", "image": "img:1", "gpus": gpus, "gpu_sku": SKU, "team": team, "kind": "training"}
    r = client.post("/v1/workloads", json=body)
    assert r.status_code == 201, r.text
    wid: str = r.json()["workload_id"]
    return wid


def test_a_workload_riding_two_reservations_of_one_pool_has_a_cost(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ``build_books`` names an allocation ``<workload>@<start>/<pool>/<parts>``. Two
    reservations in one pool (two purchases of H100s in us-east-1) that a workload rides with the same GPUs from each
    give two allocations of one id, ``allocate_costs`` refuses the books ("two allocations have this id"), and every
    cost read answers 422 naming an internal allocation: the app team's workload cost, the dashboard, /metrics."""
    s = _fleet(database, make_server, [("res_1", 4), ("res_2", 4)])
    with s.client("app_team", "ann", team="team-a") as a, s.client("ml_platform_admin", "bob") as admin:
        wid = _workload(a, "team-a", 8)
        recs = [_rec(wid, "team-a", NOW_S - (h + 1) * H, H, 8.0) for h in range(24)]
        assert admin.post("/v1/utilization:ingest", json={"records": recs}).status_code == 200
        cost = a.get(f"/v1/workloads/{wid}/cost", params={"window": "1d"})
        assert cost.status_code == 200, cost.text
        assert cost.json()["allocated_gpu_h"] == 8 * 24
        assert cost.json()["by_tier_usd"] == {"reserved": 837.48}  # 8 x 24 h x 4.3619 $, to the cent
        with s.client("viewer", "prom") as v:
            assert v.get("/metrics").status_code == 200


def test_an_hourly_and_a_five_minute_meter_share_a_reservation(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: ``build_books`` fills reservations bucket START by bucket start, with the whole
    reservation free again for each start. Team A's workload metered hourly from :00 and team B's metered every 5
    minutes (records from :05 on) both ride the full 8-GPU reservation at once: 16 GPUs held on 8, the books are
    refused as over-allocated and every cost read is a 422."""
    s = _fleet(database, make_server, [("res_1", 8)])
    with (
        s.client("app_team", "ann", team="team-a") as a,
        s.client("app_team", "ben", team="team-b") as b,
        s.client("ml_platform_admin", "bob") as admin,
    ):
        wa, wb = _workload(a, "team-a", 8), _workload(b, "team-b", 2)
        t = NOW_S - 2 * H
        recs = [_rec(wa, "team-a", t, H, 8.0, "k8s")]
        recs += [_rec(wb, "team-b", t + i * 300, 300, 2.0) for i in range(1, 12)]
        assert admin.post("/v1/utilization:ingest", json={"records": recs}).status_code == 200
        ca, cb = a.get(f"/v1/workloads/{wa}/cost"), b.get(f"/v1/workloads/{wb}/cost")
        assert ca.status_code == 200 and cb.status_code == 200, (ca.text, cb.text)
        assert ca.json()["allocated_gpu_h"] + cb.json()["allocated_gpu_h"] == pytest.approx(8 + 2 * 55 / 60)
        with s.client("viewer", "prom") as v:
            assert v.get("/metrics").status_code == 200
