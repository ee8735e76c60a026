"""A pool's price history on the store (migration 0013): what keeps it (a registry update, the cloud price sync),
what reads it (the FinOps books, the budget's metered spend) and that it never blocks deleting an unused pool.
SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import PoolPriceRow
from gpufleet.domain.money import units_to_cents
from gpufleet.service.clock import FixedClock
from gpufleet.service.cloud_catalog import CloudCatalogService
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, DAY, OD_POOL, H, rec, services, team
from tests.integration.test_review_svc_price_sync import _LyingPrices

NOW = NOW_S + 10 * DAY


def _history(database: Database, pool: str) -> list[tuple[int, int]]:
    with Session(database.engine) as s:
        rows = s.execute(select(PoolPriceRow.until_s, PoolPriceRow.price_uusd_per_gpu_h)
                         .where(PoolPriceRow.pool_id == pool).order_by(PoolPriceRow.until_s)).all()  # fmt: skip
    return [(int(u), int(p)) for u, p in rows]


def test_a_bucket_spanning_a_change_is_charged_at_both_prices_by_the_books_and_the_budget(database: Database) -> None:
    """8 GPUs for one 2-hour bucket; the on-demand price doubles an hour into it: 8 x 6.88 + 8 x 13.76 = 165.12 $,
    in the books and in the budget alike; a second change in the same second keeps the price before the first."""
    svc, clock, finops = services(database, NOW)
    team(svc, "t1")
    start = NOW - 3 * H
    svc.ingest.ingest(ADMIN, [rec("k8s:c1:us-east-1:h100_80gb:on_demand", start, 2 * H, "ns:train", "t1", 8.0)])
    clock.set(start + H)
    svc.registry.update(ADMIN, "pool", OD_POOL, {"price_usd_per_gpu_h": Decimal("99")})
    svc.registry.update(ADMIN, "pool", OD_POOL, {"price_usd_per_gpu_h": Decimal("13.76")})  # same second
    assert _history(database, OD_POOL) == [(start + H, 6_880_000)]
    clock.set(NOW)
    svc.budgets.set(ADMIN, "t1", limit_usd=Decimal(100_000), period="month", enforce=True)
    assert svc.budgets.status(ADMIN, "t1")["metered_usd"] == Decimal("165.12")
    assert units_to_cents(finops.snapshot(DAY).result.fleet_units) == Decimal("165.12")


def test_the_price_sync_keeps_the_old_price_and_deleting_the_pool_takes_its_history(database: Database) -> None:
    svc, _clock, _finops = services(database, NOW)
    CloudCatalogService(database.engine, FixedClock(NOW), _LyingPrices("7.50")).sync(ADMIN, sku_id="h100_80gb")
    CloudCatalogService(database.engine, FixedClock(NOW + H), _LyingPrices("7.50")).sync(ADMIN, sku_id="h100_80gb")
    assert _history(database, OD_POOL) == [(NOW, 6_880_000)]  # an unchanged quote keeps nothing
    svc.registry.delete(ADMIN, "pool", OD_POOL)  # no record names it: its history goes with it, no 409
    assert _history(database, OD_POOL) == []
