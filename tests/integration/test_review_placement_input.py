"""Bad input to POST /v1/placement/recommendations over HTTP on SQLite and PostgreSQL: a name that matches nothing
in the store is a 422 naming the field (the house rule; the request's own ``sku`` and ``regions`` already are),
not a silently ignored part of the request."""

from __future__ import annotations

from tests.integration.conftest import LiveServer

BODY = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 8}


def test_a_degrade_option_naming_an_unknown_sku_is_a_422(shared_server: LiveServer) -> None:
    """Review (fixed), the defect: ChainPlacementService.recommend checked the request's SKU only, so a degrade
    option with a mistyped SKU was never tried and the answer did not say why."""
    with shared_server.client("viewer", "vic") as v:
        ok = v.post("/v1/placement/recommendations", json={**BODY, "degrade_options": [{"sku": "a100_80gb"}]})
        assert ok.status_code == 200, ok.text
        r = v.post("/v1/placement/recommendations",
                   json={**BODY, "degrade_options": [{"gpus": 4}, {"sku": "a100_80g"}]})  # fmt: skip
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "degrade_options[1].sku" and "a100_80g" in r.json()["detail"]


def test_running_work_in_an_unknown_pool_is_a_422(shared_server: LiveServer) -> None:
    """Review (fixed), the defect: running work naming a pool that does not exist (a typo) was silently never a
    preemption candidate, so a high-priority job queued instead of preempting, with no word about the pool."""
    running = {"workload_id": "w-low", "gpus": 8, "priority": "low"}
    with shared_server.client("ml_platform_admin", "ada") as a:  # what runs in a pool fits in its allocated GPUs
        r = a.patch("/v1/pools/aws/us-east-1/h100_80gb/reserved", json={"allocated_gpus": 8})
        assert r.status_code == 200, r.text
    with shared_server.client("viewer", "vic") as v:
        good = [{**running, "pool": "aws/us-east-1/h100_80gb/reserved"}]
        assert v.post("/v1/placement/recommendations", json={**BODY, "running": good}).status_code == 200
        bad = [{**running, "pool": "aws/us-east-1/h100_80gb/reserved"}, {**running, "pool": "aws/us-east-1/h100/od"}]
        r = v.post("/v1/placement/recommendations", json={**BODY, "running": bad})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "running[1].pool" and "aws/us-east-1/h100/od" in r.json()["detail"]
