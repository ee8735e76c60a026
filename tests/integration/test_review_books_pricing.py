"""Review: prices of hours already used. Neither book keeps the price an hour was incurred at: both read the pools'
current prices whenever they are read."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.domain.money import units_to_cents
from gpufleet.service.budgets import PricedOption
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, DAY, OD_POOL, H, rec, services, team

NOW = NOW_S + 10 * DAY  # 2026-01-11: the month window is January


def _two_days_ago(team_id: str) -> list[dict[str, object]]:
    """8 GPUs in the us-east-1 on-demand pool for the 24 hours of two days ago: spend already incurred."""
    return [rec("k8s:c1:us-east-1:h100_80gb:on_demand", NOW - 2 * DAY + h * H, H, "ns:train", team_id, 8.0)
            for h in range(24)]  # fmt: skip


def test_a_pool_price_change_does_not_reprice_hours_already_used(database: Database) -> None:
    """Review (fixed, session 43: ``pool_prices``, migration 0013), the defect: a pool's price update (registry PUT, or the cloud price sync) re-prices every past hour in the
    FinOps books (``service/finops.py`` ``_load`` prices records at ``PoolRow.price_uusd_per_gpu_h`` now) and in the
    budget's metered spend (``service/budgets.py`` ``_held``: the cheapest on-demand price now). The registry itself
    refuses deleting a pool because that "would re-price the costs already incurred in it"; changing its price
    does exactly that: last week's chargeback and this month's budget double after a price rise today."""
    svc, clock, finops = services(database, NOW)
    team(svc, "t1")
    svc.ingest.ingest(ADMIN, _two_days_ago("t1"))
    svc.budgets.set(ADMIN, "t1", limit_usd=Decimal(100_000), period="month", enforce=True)
    books_before = units_to_cents(finops.snapshot(3 * DAY).result.fleet_units)
    metered_before = svc.budgets.status(ADMIN, "t1")["metered_usd"]
    assert books_before == metered_before == Decimal("1320.96")  # 8 x 24 x 6.88

    clock.set(NOW + 60)  # the price doubles from now on
    svc.registry.update(ADMIN, "pool", OD_POOL, {"price_usd_per_gpu_h": Decimal("13.76")})
    clock.set(NOW)  # read the same window again
    assert svc.budgets.status(ADMIN, "t1")["metered_usd"] == metered_before, "the budget re-priced the past"
    assert units_to_cents(finops.snapshot(3 * DAY).result.fleet_units) == books_before, "the books re-priced the past"


def test_budget_meters_hours_at_the_pool_they_ran_in_not_a_cheaper_pool_elsewhere(database: Database) -> None:
    """Defect: the budget's metered spend prices every record at the SKU's cheapest on-demand pool in ANY region
    (``service/budgets.py`` ``_held``'s ``cheapest_on_demand`` subquery), ignoring the record's own ``pool_id``. The
    module promises the same price basis as the on-demand part of the FinOps books and to "err on the side of not
    overrunning"; registering one cheap on-demand pool in another region instead makes 1,320.96 $ of us-east-1
    spend meter as 19.20 $, and a placement that overruns the budget by hundreds of dollars is admitted."""
    svc, _clock, finops = services(database, NOW)
    team(svc, "t1")
    svc.ingest.ingest(ADMIN, _two_days_ago("t1"))
    svc.registry.create(ADMIN, "pool", {"id": "aws/eu-north1/h100_80gb/on_demand", "provider_id": "aws",
                                        "region_id": "eu-north1", "sku_id": "h100_80gb", "tier": "on_demand",
                                        "price_usd_per_gpu_h": Decimal("0.10")})  # fmt: skip
    books = units_to_cents(finops.snapshot(3 * DAY).result.fleet_units)
    assert books == Decimal("1320.96")  # the books charge the pool the GPUs ran in
    svc.budgets.set(ADMIN, "t1", limit_usd=Decimal(1500), period="month", enforce=True)
    # 8 GPUs for 10 hours in the us-east-1 pool: 550.40 $, on top of 1,320.96 $ already spent > 1,500 $
    out = svc.budgets.admit_placement(
        ADMIN, "t1", preferred=PricedOption("requested", 6_880_000, 8, OD_POOL), degrade=[],
        expected_run_s=10 * H, context={},
    )  # fmt: skip
    assert out is not None
    assert out.action.value == "queue", f"admitted past the budget: {out.body}"
    assert out.body["metered_usd"] == books
