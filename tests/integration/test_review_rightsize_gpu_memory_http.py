"""Review: the rightsizing the HTTP API recommends for a workload whose stored usage has GPU utilization only (no GPU
memory), and what applying it through ``POST .../rightsizing:apply`` + ``POST /v1/changes/{id}:apply`` would do."""

from __future__ import annotations

from typing import Any

from gpufleet.domain.skus import SKUS_BY_ID
from tests.integration.conftest import NOW_S, Database, ServerFactory

DAY, BUCKET = 86_400, 1800  # 336 buckets a week: more than rightsizing's minimum samples
SKU = "h100_80gb"


def _rec(wid: str, start_s: int) -> dict[str, Any]:
    return {"source": "dcgm", "bucket_start_s": start_s, "bucket_s": BUCKET, "workload_id": wid, "team_id": "team-a",
            "sku_id": SKU, "gpus_allocated": 8.0, "gpu_util": 0.10}  # fmt: skip


def test_http_rightsizing_keeps_the_gpu_memory_it_never_measured(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the stored usage has GPU utilization only, ``control/costing.py`` passes an
    all-NaN ``gpu_mem_gb`` and ``recommend`` read it as 0 GB: ``GET /v1/workloads/{id}/cost`` recommended 1 x H100
    (80 GB) for an 8 x H100 (640 GB) serving replica at 10 % busy, and ``rightsizing:apply`` +
    ``/v1/changes/{id}:apply`` set the workload to it. Expected: the recommended spec keeps >= 640 GB of GPU memory
    and says why."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as admin:
        assert admin.post("/v1/teams", json={"id": "team-a", "name": "team-a"}).status_code == 201
        t = admin.post("/v1/tenants", json={"id": "team-a-prod", "name": "prod", "team_id": "team-a"})
        assert t.status_code == 201
        body = {"name": "llm-70b", "image": "img:1", "gpus": 8, "gpu_sku": SKU, "team": "team-a", "kind": "serving"}
        r = admin.post("/v1/workloads", json=body)
        assert r.status_code == 201, r.text
        wid = r.json()["workload_id"]
        recs = [_rec(wid, NOW_S - 7 * DAY + i * BUCKET) for i in range(7 * DAY // BUCKET)]
        assert admin.post("/v1/utilization:ingest", json={"records": recs}).status_code == 200
        cost = admin.get(f"/v1/workloads/{wid}/cost", params={"window": "7d"})
        assert cost.status_code == 200, cost.text
        rec = cost.json()["rightsizing"]["recommendation"]
        assert rec["evidence"]["gpu_mem_p_gb"] is None  # nothing measured the GPU memory
        after = rec["recommended"]
        # what an operator applies: the recommended spec through the change lifecycle
        ch = admin.post(f"/v1/workloads/{wid}/rightsizing:apply",
                        json={"cpu": after["cpu"], "mem_gb": after["mem_gb"], "gpus": after["gpus"],
                              "gpu_sku": after["gpu_sku"], "ticket": "FINOPS-7"})  # fmt: skip
        assert ch.status_code == 202, ch.text
        applied = admin.post(f"/v1/changes/{ch.json()['change_id']}:apply", json={"reason": "finops"})
        assert applied.status_code == 200, applied.text
        spec = applied.json()["after"]
        gpu_mem = spec["gpus"] * SKUS_BY_ID[spec["gpu_sku"]].memory_gb
        assert gpu_mem >= 8 * 80, f"applied {spec} ({gpu_mem} GB) to a model that held 640 GB; reasons {rec['reasons']}"
        assert "gpu_memory_unmeasured_kept" in rec["reasons"]
        assert "cheaper_sku_fits_memory_and_throughput" not in rec["reasons"]


def test_http_rightsizing_sizes_measured_gpu_memory(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the second half: with ``gpu_mem_gb`` ingested (the most GPU memory one replica used, e.g.
    30 GB of an 8 x H100 replica at 10 % busy) the memory-aware rule applies: fewer GPUs that hold 30 GB x 1.2 and
    the throughput, no ``gpu_memory_unmeasured_kept``; one record without it makes that bucket unmeasured."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as admin:
        assert admin.post("/v1/teams", json={"id": "team-a", "name": "team-a"}).status_code == 201
        t = admin.post("/v1/tenants", json={"id": "team-a-prod", "name": "prod", "team_id": "team-a"})
        assert t.status_code == 201
        body = {"name": "llm-8b", "image": "img:1", "gpus": 8, "gpu_sku": SKU, "team": "team-a", "kind": "serving"}
        wid = admin.post("/v1/workloads", json=body).json()["workload_id"]
        recs = [_rec(wid, NOW_S - 7 * DAY + i * BUCKET) | {"gpu_mem_gb": 30.0} for i in range(7 * DAY // BUCKET)]
        bad = admin.post("/v1/utilization:ingest", json={"records": [recs[0] | {"gpu_mem_gb": -1.0}]})
        assert bad.status_code == 422 and "gpu_mem_gb" in bad.text
        assert admin.post("/v1/utilization:ingest", json={"records": recs}).status_code == 200
        rec = admin.get(f"/v1/workloads/{wid}/cost", params={"window": "7d"}).json()["rightsizing"]["recommendation"]
        assert rec["evidence"]["gpu_mem_p_gb"] == 30.0 and rec["evidence"]["gpu_mem_floor_gb"] is None
        after = rec["recommended"]
        gpu_mem = after["gpus"] * SKUS_BY_ID[after["gpu_sku"]].memory_gb
        assert 36 <= gpu_mem < 640, rec
        assert "gpu_memory_unmeasured_kept" not in rec["reasons"], rec
