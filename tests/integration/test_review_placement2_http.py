"""Review (placement2) over HTTP on SQLite and PostgreSQL: ``/v1/placement/...`` against stored pools. Pool signals
that outlive what they report, degrade SKUs that cannot hold the job, and concurrent admissions of the last GPUs."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

URL = "/v1/placement/recommendations"
L40S_OD = "aws/us-east-1/l40s/on_demand"


def test_a_forgotten_stockout_signal_expires(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: service/placement_chain.py joins ``pool_signals`` into every placement whatever its
    ``updated_at_s``: a stockout reported once (and never cleared: the adapter died, the operator forgot) steers every
    placement away from the pool forever, and a queue wait reported a week ago still dates queued work. Expected: a
    signal older than ``placement_signal_max_age_s`` (default 6 hours) no longer counts, and ``GET
    /v1/placement/signals`` lists each signal with ``stale`` and ``expires_at_s``."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    serving = {"job_class": "serving", "priority": "critical", "sku": "l40s", "gpus": 4, "regions": ["us-east-1"]}
    with s.client("ml_platform_admin", "ada") as a:
        r = a.put("/v1/placement/signals", json={"pool": L40S_OD, "stockout": True, "queue_wait_s": 3600})
        assert r.status_code == 200, r.text
        d = a.post(URL, json=serving).json()
        assert d["action"] == "queue" and {x["pool"]: x["trigger"] for x in d["skipped"]}[L40S_OD] == "stockout"
        clock.advance(3 * 3600)  # still fresh
        assert a.post(URL, json=serving).json()["action"] == "queue"
        clock.advance(7 * 86400)  # a week later nobody has cleared it
        d = a.post(URL, json=serving).json()
        assert (d["action"], d["pool"], d["reason"]) == ("place", L40S_OD, "placed_on_demand"), d
        r = a.put("/v1/placement/signals", json={"pool": "aws/us-east-1/l4/on_demand", "stockout": True})
        assert r.status_code == 200 and r.json()["stale"] is False, r.text
        got = a.get("/v1/placement/signals")
        assert got.status_code == 200, got.text
        sig = {x["pool"]: x for x in got.json()}
        assert sig[L40S_OD]["stale"] is True and sig[L40S_OD]["stockout"] is True
        assert sig[L40S_OD]["updated_at_s"] == NOW_S and sig[L40S_OD]["expires_at_s"] == NOW_S + 6 * 3600
        fresh = sig["aws/us-east-1/l4/on_demand"]
        assert fresh["stale"] is False and fresh["expires_at_s"] == clock.now_s() + 6 * 3600
    with s.client("viewer", "vic") as v:  # readers see the signals placement uses
        assert v.get("/v1/placement/signals").status_code == 200


def test_a_degrade_sku_without_the_memory_the_replica_needs_is_not_taken(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the request says nothing about the GPU memory a replica needs (``replica_gpu_memory_gb``
    is refused as an unknown field) and the chain takes any declared degrade SKU: a serving replica that needs 600 GB
    across its 8 H100s (8 x 80 GB) is downshifted onto 8 L4s (8 x 24 = 192 GB) that cannot hold it, although the SKU
    registry knows each SKU's ``memory_gb``. Expected: with ``replica_gpu_memory_gb`` declared, a pool whose SKU's
    memory x GPUs per replica is below it is skipped (trigger ``gpu_memory``), the next option that holds it is
    taken, and with none the request queues."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch("/v1/pools/aws/us-east-1/h100_80gb/on_demand", json={"quota_gpus": 0}).status_code == 200
        job = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"],
               "replica_gpu_memory_gb": 600}  # fmt: skip
        r = a.post(URL, json={**job, "degrade_options": [{"sku": "l4"}, {"sku": "h200_141gb", "gpus": 5}]})
        assert r.status_code == 200, r.text
        d = r.json()
        assert (d["action"], d["sku"], d["gpus"]) == ("degrade", "h200_141gb", 5), d
        assert "l4" not in {x["pool"].split("/")[2] for x in d["fallback"] if x["pool"]}
        r = a.post(URL, json={**job, "degrade_options": [{"sku": "l4"}, {"gpus": 4}]})
        assert r.status_code == 200, r.text
        assert (r.json()["action"], r.json()["pool"]) == ("queue", None)
        # the requested SKU itself too small: never placed there
        r = a.post(URL, json={**job, "sku": "l40s", "replica_gpu_memory_gb": 400})
        assert r.status_code == 200, r.text
        assert r.json()["action"] == "queue" and {x["trigger"] for x in r.json()["skipped"]} == {"gpu_memory"}


RACERS = 6


def _race(s: LiveServer, token: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    gate = threading.Barrier(RACERS)

    def one() -> None:
        with httpx.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            gate.wait()
            r = c.post(URL, json=body)
            out.append({"status": r.status_code, **(r.json() if r.status_code == 200 else {"text": r.text})})

    threads = [threading.Thread(target=one) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_concurrent_admissions_cannot_all_take_a_pools_last_gpus(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ``admit: true`` books the team's budget but never the pool's GPUs (the placement reads the
    pools with no lock and writes nothing to them), so concurrent admissions (and sequential ones too) are all placed
    in a pool that has room for one: 6 admissions of 8 GPUs into an on-demand pool with 8 GPUs of quota left are all
    answered ``place`` there. Expected: an admitted placement takes its GPUs (``allocated_gpus``) in the transaction
    that re-checks the pool's room under its row lock (PostgreSQL) or the write lock (SQLite); exactly one admission
    gets the pool, the others move down the chain (here: the queue)."""
    s = make_server(database)
    with s.client("ml_platform_admin", "ada") as a:
        r = a.patch(f"/v1/pools/{L40S_OD}", json={"quota_gpus": 16, "allocated_gpus": 8})
        assert r.status_code == 200, r.text
    body = {"job_class": "serving", "priority": "critical", "sku": "l40s", "gpus": 8, "regions": ["us-east-1"],
            "admit": True}  # fmt: skip
    got = _race(s, s.token("ml_platform_admin", "ada"), body)
    assert all(g["status"] == 200 for g in got), got
    placed = [g for g in got if g["action"] == "place"]
    assert [g["pool"] for g in placed] == [L40S_OD], [(g["action"], g["pool"]) for g in got]
    assert all(g["action"] == "queue" and g["pool"] is None for g in got if g not in placed)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.get(f"/v1/pools/{L40S_OD}").json()["allocated_gpus"] == 16
        # a recommendation (no admit) books nothing
        assert a.post(URL, json={**body, "admit": False}).json()["action"] == "queue"
        assert a.get(f"/v1/pools/{L40S_OD}").json()["allocated_gpus"] == 16
        # a team with a budget: the GPUs are taken in the budget's booking transaction (group-committed batches)
        assert a.post("/v1/teams", json={"id": "racers", "name": "Racers"}).status_code == 201
        assert a.put("/v1/teams/racers/budget", json={"limit_usd": "1000000"}).status_code == 200
        assert a.patch(f"/v1/pools/{L40S_OD}", json={"allocated_gpus": 8}).status_code == 200
    got = _race(s, s.token("ml_platform_admin", "ada"), {**body, "team": "racers", "expected_run_s": 3600})
    assert all(g["status"] == 200 for g in got), got
    placed = [g for g in got if g["action"] == "place"]
    assert [g["pool"] for g in placed] == [L40S_OD], [(g["action"], g["pool"]) for g in got]
    assert placed[0]["budget"]["booked"] is True and placed[0]["budget"]["action"] == "admit"
    with s.client("ml_platform_admin", "ada") as a:
        assert a.get(f"/v1/pools/{L40S_OD}").json()["allocated_gpus"] == 16
        budget = a.get("/v1/teams/racers/budget").json()
        assert float(budget["committed_usd"]) == float(placed[0]["budget"]["request_usd"])  # one booking, not six


def test_an_admission_past_the_counts_range_is_a_conflict(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect (of the admission's claim as first written): an admission adds its GPUs to
    ``allocated_gpus`` (a 32-bit column on PostgreSQL; ``PATCH`` accepts up to 2**31 - 1); on an unbounded pool nothing
    stopped the sum there: SQLite stored a count no PATCH could set (200), PostgreSQL answered 422 blaming the request
    body (``integer out of range``). Expected on both: 409, the count unchanged."""
    s = make_server(database)
    spot = "nebius/eu-north1/h100_80gb/spot"
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{spot}", json={"allocated_gpus": 2**31 - 10}).status_code == 200
        body = {"job_class": "training", "priority": "normal", "sku": "h100_80gb", "gpus": 16, "checkpointable": True,
                "regions": ["eu-north1"], "admit": True}  # fmt: skip
        r = a.post(URL, json=body)
        assert r.status_code == 409, r.text
        assert a.get(f"/v1/pools/{spot}").json()["allocated_gpus"] == 2**31 - 10
