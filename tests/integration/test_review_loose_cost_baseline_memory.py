"""Review (loose) over HTTP on SQLite and PostgreSQL: the GPU-count baseline of ``GET /v1/workloads/{id}/cost``
(``rightsizing.recommended_gpus``, ``service/usage.py``) and the GPU memory the records measured or not."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.conftest import NOW_S, Database, ServerFactory

DAY, BUCKET = 86_400, 1800
SKU = "h100_80gb"


def _rightsizing(database: Database, make_server: ServerFactory, gpu_mem_gb: float | None) -> dict[str, Any]:
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as admin:
        assert admin.post("/v1/teams", json={"id": "team-a", "name": "team-a"}).status_code == 201
        t = admin.post("/v1/tenants", json={"id": "team-a-prod", "name": "prod", "team_id": "team-a"})
        assert t.status_code == 201
        body = {"name": "llm-70b", "image": "img:1", "gpus": 8, "gpu_sku": SKU, "team": "team-a", "kind": "serving"}
        r = admin.post("/v1/workloads", json=body)
        assert r.status_code == 201, r.text
        wid = r.json()["workload_id"]
        recs = [
            {"source": "dcgm", "bucket_start_s": NOW_S - 7 * DAY + i * BUCKET, "bucket_s": BUCKET, "workload_id": wid,
             "team_id": "team-a", "sku_id": SKU, "gpus_allocated": 8.0, "gpu_util": 0.10,
             **({} if gpu_mem_gb is None else {"gpu_mem_gb": gpu_mem_gb})}
            for i in range(7 * DAY // BUCKET)
        ]  # fmt: skip
        assert admin.post("/v1/utilization:ingest", json={"records": recs}).status_code == 200
        cost = admin.get(f"/v1/workloads/{wid}/cost", params={"window": "7d"})
        return _ok(cost)


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["rightsizing"]
    return out


def test_the_cost_baseline_keeps_unmeasured_gpu_memory(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: for an 8 x H100 replica at 10 % busy with no GPU memory measured, the baseline said
    ``overprovisioned``, ``recommended_gpus`` 1 and 7 GPUs' daily savings, a cut the apply path (``recommend``:
    ``gpu_memory_unmeasured_kept``) refuses: nothing showed the model fits in 80 GB. Now the baseline keeps the
    replica's GPUs and says why (``gpu_memory`` ``unmeasured_kept``), beside the recommendation that agrees."""
    out = _rightsizing(database, make_server, None)
    assert out["recommended_gpus"] == 8 and out["reason"] == "right_sized", out
    assert out["gpu_memory"] == "unmeasured_kept" and out["p99_gpu_mem_gb"] is None, out
    assert float(out["est_savings_usd_per_day"]) == 0.0
    assert out["recommendation"]["recommended"]["gpus"] * 80 >= 640  # the apply path agrees: 640 GB kept


def test_the_cost_baseline_holds_the_measured_peak_memory(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect, measured: a replica whose peak GPU memory is 200 GB (p99 + 20 % = 240 GB: 3 x H100) was told 1 GPU
    (80 GB) by the baseline, throughput alone. Now never below the GPUs the measured peak needs."""
    out = _rightsizing(database, make_server, 200.0)
    assert out["recommended_gpus"] == 3 and out["reason"] == "overprovisioned", out
    assert out["gpu_memory"] == "measured" and out["p99_gpu_mem_gb"] == 200.0 and out["memory_floor_gpus"] == 3, out


def test_the_cost_baseline_cuts_what_measured_memory_allows(database: Database, make_server: ServerFactory) -> None:
    """Review (holds): measured at 30 GB a replica (36 GB with headroom: one H100), the throughput cut stands."""
    out = _rightsizing(database, make_server, 30.0)
    assert out["recommended_gpus"] == 1 and out["reason"] == "overprovisioned", out
