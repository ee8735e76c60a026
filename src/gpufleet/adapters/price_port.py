"""The cloud price port: what a provider lists for a GPU SKU's on-demand and spot capacity in a region, in USD per
GPU-hour (its instance's price divided by its GPUs). Implementations: ``adapters/aws/prices.py`` (the Price List API
and spot price history), ``adapters/azure/prices.py`` (the Retail Prices API) and ``adapters/gcp/prices.py`` (the
Cloud Billing Catalog API). Errors are the provider port's."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PriceQuote:
    tier: str  # "on_demand" or "spot"
    usd_per_gpu_h: Decimal
    source: str  # where it was read (audited with the change)


class CloudPrices(Protocol):
    provider: str
    regions: tuple[str, ...]

    def skus(self) -> Collection[str]:
        """The SKUs it can price (those with an instance type of the provider)."""

    def quotes(self, region: str, sku_id: str, *, now_s: int) -> list[PriceQuote]:
        """The SKU's prices in ``region`` (a tier the provider does not list is absent)."""
