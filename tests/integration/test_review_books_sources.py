"""Review: the same held GPU-hours read through the budget's metering and through the FinOps books.

The Kubernetes meter writes one record per (source = ``k8s:<cluster>:<region>:<sku>:<tier>``, workload, hour). A
workload (its ``gpufleet.io/workload-id``) running in two clusters of one region and tier therefore has two records
for the same workload-hour and pool, each with the GPUs held in its cluster."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.domain.money import units_to_cents
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, DAY, H, rec, services, team

NOW = NOW_S + 10 * DAY


def test_budget_and_finops_books_price_two_sources_of_one_workload_hour_the_same(database: Database) -> None:
    """Defect: the budget's metered spend sums every record (``service/budgets.py`` ``_held``: sum of
    gpus_allocated x bucket_s), while the FinOps books keep only the max of the records of one workload, bucket and
    pool (``service/finops.py`` ``_load``: ``func.max(gpus_allocated)`` grouped without the source). Two clusters
    holding 4 GPUs each for the same workload-hour cost 8 GPU-hours in the budget and 4 in the chargeback: the
    same usage is billed twice as much by one book as by the other."""
    svc, _clock, finops = services(database, NOW)
    team(svc, "t1")
    recs = [
        rec(f"k8s:{cluster}:us-east-1:h100_80gb:on_demand", NOW - DAY + h * H, H, "ns:train", "t1", 4.0)
        for cluster in ("c1", "c2")
        for h in range(24)
    ]
    svc.ingest.ingest(ADMIN, recs)
    svc.budgets.set(ADMIN, "t1", limit_usd=Decimal(100_000), period="month", enforce=True)
    metered = svc.budgets.status(ADMIN, "t1")["metered_usd"]
    books = finops.snapshot(DAY).result
    assert books.conserved
    # 8 GPUs x 24 h at the pool's 6.88 $/GPU-h
    assert metered == Decimal("1320.96")
    assert units_to_cents(books.fleet_units) == metered, "the chargeback and the budget disagree on the same hours"
