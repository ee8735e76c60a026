"""Review (fixed): ``CloudCatalogService.sync`` writes whatever the price port quotes into the catalog. The API refuses
a pool price below 0 or above 1e12 USD (``api/types.UsdIn``) and the Azure adapter drops a quote <= 0, but the AWS
adapter (``adapters/aws/prices.py``: ``_on_demand_usd`` and the spot history, ``SpotPrice`` defaulting to "0") passes 0
and negative prices through, and the service checks nothing: one bad answer from the provider overwrites a good catalog
price with 0 or a negative one (placement then ranks that pool cheapest, chargeback and cost go negative)."""

from __future__ import annotations

from collections.abc import Collection
from decimal import Decimal

from sqlalchemy.orm import Session

from gpufleet.adapters.price_port import PriceQuote
from gpufleet.adapters.sql.models import PoolRow
from gpufleet.domain.money import price_to_uusd
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from gpufleet.service.cloud_catalog import CloudCatalogService
from tests.integration.conftest import NOW_S, Database

ADMIN = Actor("fiona", Role.FINOPS_ADMIN, None)
POOL = "aws/us-east-1/h100_80gb/on_demand"


class _LyingPrices:
    provider = "aws"
    regions: tuple[str, ...] = ("us-east-1",)

    def __init__(self, usd: str) -> None:
        self._usd = Decimal(usd)

    def skus(self) -> Collection[str]:
        return ("h100_80gb",)

    def quotes(self, region: str, sku_id: str, *, now_s: int) -> list[PriceQuote]:
        return [PriceQuote("on_demand", self._usd, "pricing:GetProducts")]


def test_review_a_zero_or_negative_quote_does_not_overwrite_the_catalog_price(database: Database) -> None:
    """Review (fixed), the defect: a quote of 0 or -1.25 USD/GPU-h replaces the stored on-demand price (6.88) as is.
    Expected: a price the API itself would refuse (< 0), or a zero price, is not written (left as it was, reported)."""
    with Session(database.engine) as s:
        before = s.get(PoolRow, POOL)
        assert before is not None and before.price_uusd_per_gpu_h > 0
        good = before.price_uusd_per_gpu_h
    for bad in ("-1.25", "0"):
        CloudCatalogService(database.engine, FixedClock(NOW_S), _LyingPrices(bad)).sync(ADMIN, sku_id="h100_80gb")
        with Session(database.engine) as s:
            row = s.get(PoolRow, POOL)
            assert row is not None
            assert row.price_uusd_per_gpu_h == good, (
                f"a quote of {bad} USD/GPU-h overwrote the catalog: {row.price_uusd_per_gpu_h} uUSD "
                f"(was {good}, {price_to_uusd(bad)} written)"
            )
