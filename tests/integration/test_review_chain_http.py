"""Review (chain) over HTTP on SQLite and PostgreSQL: ``POST /v1/placement/recommendations`` on the stored pools
decides as the simulator's placer would (tests/unit/test_review_chain_parity.py), spot stays checkpointed
training's, and an exhausted chain is a queue decision with its reasons, never an error."""

from __future__ import annotations

from tests.integration.conftest import NOW_S, LiveServer

URL = "/v1/placement/recommendations"


def test_checkpointed_training_is_recommended_the_cheaper_spot_pool(shared_server: LiveServer) -> None:
    """Review (fixed), the defect: with the seeded H200 pools (no reservation, on-demand $7.91, spot $1.45, both
    unbounded and in stock) a checkpointed training job was recommended on-demand; the simulator's loop launches
    it on spot, the cheaper tier."""
    body = {"job_class": "training", "priority": "normal", "sku": "h200_141gb", "gpus": 8, "checkpointable": True}
    with shared_server.client("viewer", "vic") as v:
        r = v.post(URL, json=body)
        assert r.status_code == 200, r.text
        d = r.json()
        assert (d["action"], d["pool"], d["tier"]) == ("place", "nebius/eu-north1/h200_141gb/spot", "spot")
        assert d["price_usd_per_gpu_h"] == 1.45 and d["reason"]
        # the same job without checkpoints never rides spot
        r = v.post(URL, json={**body, "checkpointable": False})
        assert r.status_code == 200, r.text
        assert (r.json()["pool"], r.json()["tier"]) == ("aws/us-east-1/h200_141gb/on_demand", "on_demand")


def test_on_demand_with_room_is_not_passed_over_for_a_dearer_secondary(shared_server: LiveServer) -> None:
    """Review (fixed), the defect: an on-demand pool at 96 of its 100 GPUs of quota was skipped
    (``pool_utilization``) for a 4-GPU serving replica that fits in it, and the replica recommended on the secondary
    provider at $9.00 per GPU-hour instead of on-demand at $3.77."""
    with shared_server.client("ml_platform_admin", "ada") as a:
        r = a.patch("/v1/pools/aws/us-east-1/l40s/on_demand", json={"quota_gpus": 100, "allocated_gpus": 96})
        assert r.status_code == 200, r.text
        r = a.patch("/v1/pools/nebius/eu-north1/l40s/secondary", json={"price_usd_per_gpu_h": "9.00"})
        assert r.status_code == 200, r.text
    with shared_server.client("viewer", "vic") as v:
        r = v.post(URL, json={"job_class": "serving", "priority": "critical", "sku": "l40s", "gpus": 4})
        assert r.status_code == 200, r.text
        d = r.json()
        assert (d["action"], d["pool"], d["reason"]) == ("place", "aws/us-east-1/l40s/on_demand", "placed_on_demand")
        assert [s["trigger"] for s in d["skipped"]] == ["quota_headroom"]  # the reserved pool holds nothing


def test_every_tier_exhausted_is_a_deadline_aware_queue_never_spot_for_serving(shared_server: LiveServer) -> None:
    """Serving on L4 with reserved empty, on-demand and the secondary provider stocked out, and spot the only pool
    in stock: a 200 queue decision (never spot), each pool skipped with its trigger, the expected start from the
    shortest reported wait of a pool serving may use (not spot's), and a deadline already passed is missed."""
    with shared_server.client("ml_platform_admin", "ada") as a:
        for pool, wait in (("aws/us-east-1/l4/on_demand", 7200), ("nebius/eu-north1/l4/secondary", 3600)):
            r = a.put("/v1/placement/signals", json={"pool": pool, "stockout": True, "queue_wait_s": wait})
            assert r.status_code == 200, r.text
        r = a.put("/v1/placement/signals", json={"pool": "nebius/eu-north1/l4/spot", "queue_wait_s": 60})
        assert r.status_code == 200, r.text
    with shared_server.client("viewer", "vic") as v:
        serving = {"job_class": "serving", "priority": "critical", "sku": "l4", "gpus": 1, "replicas": 2}
        r = v.post(URL, json=serving)
        assert r.status_code == 200, r.text
        d = r.json()
        assert (d["action"], d["pool"], d["tier"]) == ("queue", None, None)
        assert d["reason"] == "queued_deadline_ok" and d["expected_start_s"] == NOW_S + 3600
        assert {s["pool"]: s["trigger"] for s in d["skipped"]} == {
            "aws/us-east-1/l4/reserved": "quota_headroom",
            "aws/us-east-1/l4/on_demand": "stockout",
            "nebius/eu-north1/l4/spot": "serving_never_spot",
            "nebius/eu-north1/l4/secondary": "stockout",
        }
        queue = {"pool": None, "region": None, "tier": None, "trigger": "queue_when_all_pools_exhausted"}
        assert d["fallback"] == [queue]
        # a degrade option of a smaller size is tried on the same pools: still no spot, still a queue
        r = v.post(URL, json={**serving, "degrade_options": [{"min_replicas": 1}, {"sku": "l4", "gpus": 1}]})
        assert r.status_code == 200, r.text
        assert r.json()["action"] == "queue" and r.json()["pool"] is None
        # uncheckpointed training with a deadline already passed: queued, missed (not 'at risk'), with the expected start
        train = {"job_class": "training", "priority": "high", "sku": "l4", "gpus": 1, "deadline_s": NOW_S - 60,
                 "expected_run_s": 600}  # fmt: skip
        r = v.post(URL, json=train)
        assert r.status_code == 200, r.text
        d = r.json()
        assert (d["action"], d["reason"], d["expected_start_s"]) == ("queue", "queued_deadline_missed", NOW_S + 3600)
        assert [s["trigger"] for s in d["skipped"]] == ["quota_headroom", "stockout", "not_checkpointable", "stockout"]
