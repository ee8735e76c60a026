"""Review: rightsizing from the stored records of a workload whose GPUs run in two pools at once (the Kubernetes
meter writes one record per pool and hour: pods on on-demand and spot nodes give two records per hour)."""

from __future__ import annotations

from gpufleet.domain.skus import SKUS_BY_ID
from gpufleet.service.workloads import WorkloadSpec
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, DAY, OD_POOL, SPOT_POOL, rec, services, team

NOW = NOW_S + 10 * DAY
BUCKET = 1800  # 336 buckets a week: more than rightsizing's minimum samples


def _eight_busy_gpus_in_two_pools(database: Database):  # type: ignore[no-untyped-def]
    svc, _clock, finops = services(database, NOW)
    team(svc, "t1")
    wid = svc.workloads.create(ADMIN, WorkloadSpec("llm-train", "img", 16, 128, 8, "h100_80gb", 1, 1, "rps", None,
                                                   "t1", None, "normal", "training"))  # fmt: skip
    recs = [
        rec(src, NOW - 7 * DAY + i * BUCKET, BUCKET, wid, "t1", 4.0, util=1.0, pool=pool)
        for i in range(7 * DAY // BUCKET)
        for src, pool in (("k8s:c1:us-east-1:h100_80gb:on_demand", OD_POOL),
                          ("k8s:c1:eu-north1:h100_80gb:spot", SPOT_POOL))
    ]  # fmt: skip
    svc.ingest.ingest(ADMIN, recs)
    return svc, finops, wid


def test_finops_rightsizing_never_recommends_less_than_the_busy_gpus(database: Database) -> None:
    """Defect: ``control/costing.py`` ``rightsize`` treats each record as one sample of the whole workload
    (``util = r.util * r.gpus / spec.gpus``) instead of summing a bucket's records. 8 GPUs 100 % busy (4 + 4 in two
    pools) read as 50 % of 8, and the books recommend 4 H200s (4.8 H100-equivalents of need) with a 17,000 $/month
    "saving": less than the 8 H100s of work the workload does."""
    _svc, finops, wid = _eight_busy_gpus_in_two_pools(database)
    view = finops.workload_view(wid, 7 * DAY)
    assert view["allocated_gpu_h"] == 8 * 7 * 24
    rec = view["recommendation"]["recommended"]
    tp = SKUS_BY_ID[rec["gpu_sku"]].relative_throughput * rec["gpus"]
    assert tp >= 8 * SKUS_BY_ID["h100_80gb"].relative_throughput, f"recommended {rec} for 8 fully busy H100s"


def test_workload_cost_rightsizing_counts_the_gpus_held_in_every_pool(database: Database) -> None:
    """Defect: ``service/usage.py`` ``_rightsizing`` takes each record as one bucket of the workload
    (``current = average(gpus)``, ``p95 over gpus * util`` per record): a workload holding 8 busy GPUs in two pools
    is reported as holding 4 and told 5 GPUs suffice, below the 8 it keeps busy."""
    svc, _finops, wid = _eight_busy_gpus_in_two_pools(database)
    cost = svc.usage.workload_cost(ADMIN, wid, window_s=7 * DAY)
    assert cost["gpu_hours"] == 8 * 7 * 24
    rs = cost["rightsizing"]
    assert rs["current_gpus"] == 8.0, rs
    assert rs["recommended_gpus"] >= 8, rs
