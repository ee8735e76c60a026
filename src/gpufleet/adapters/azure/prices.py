"""Azure's list prices (the cloud price port, ``adapters/price_port.py``) from the Retail Prices API
(``https://prices.azure.com/api/retail/prices``: public, no credentials), per VM size and location, in USD per
GPU-hour (the VM's hourly price / its GPUs).

The query: ``serviceName eq 'Virtual Machines' and armRegionName eq '<location>' and armSkuName eq '<VM size>' and
priceType eq 'Consumption'``, every page followed (``NextPageLink``, on the same host only). Of the items, those
priced per ``1 Hour`` and not for Windows (``productName`` without "Windows") count: a ``skuName`` ending in
"Spot" is the spot price, one with "Low Priority" is skipped (the retired low-priority VMs), the rest is the
on-demand price. A tier the API lists twice at different prices takes the lowest; a tier it does not list is absent.
An item that is not an object, or whose ``retailPrice`` is not a finite number, is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from decimal import Decimal
from typing import Any

import httpx

from gpufleet.adapters.azure.vm_sizes import VM_SIZES, vm_size
from gpufleet.adapters.http_retry import Pages, request_json
from gpufleet.adapters.price_port import PriceQuote

PRICES_URL = "https://prices.azure.com/api/retail/prices"
SOURCE = "azure:RetailPrices"


def _tier(item: dict[str, Any]) -> str | None:
    """The tier an item prices (None: not a Linux hourly VM price gpufleet uses)."""
    sku_name, product = str(item.get("skuName", "")), str(item.get("productName", ""))
    if item.get("unitOfMeasure") != "1 Hour" or "Windows" in product or "Low Priority" in sku_name:
        return None
    return "spot" if sku_name.endswith("Spot") else "on_demand"


def _price(value: Any) -> Decimal | None:
    """An item's ``retailPrice``: a finite JSON number, else None (``NaN``, a string: an item gpufleet skips)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    price = Decimal(str(value))
    return price if price.is_finite() else None


class AzureRetailPrices:
    provider = "azure"

    def __init__(
        self,
        regions: tuple[str, ...],
        *,
        url: str = PRICES_URL,
        timeout_s: float = 10.0,
        max_attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        client: httpx.Client | None = None,
    ) -> None:
        self.regions = regions
        self._url = url
        self._max_attempts = max_attempts
        self._sleep = sleep
        self._http = client or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5.0))

    def skus(self) -> Collection[str]:
        return VM_SIZES.keys()

    def quotes(self, region: str, sku_id: str, *, now_s: int) -> list[PriceQuote]:
        size = vm_size(sku_id)
        odata = (
            f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{size.name}' "
            "and priceType eq 'Consumption'"
        )
        best: dict[str, Decimal] = {}
        for item in self._items({"$filter": odata}):
            tier = _tier(item) if isinstance(item, dict) else None
            if tier is None or item.get("armSkuName") != size.name or item.get("currencyCode", "USD") != "USD":
                continue
            price = _price(item.get("retailPrice"))
            if price is None:
                continue
            usd = price / size.gpus
            if usd > 0 and (tier not in best or usd < best[tier]):
                best[tier] = usd
        return [PriceQuote(t, best[t], SOURCE) for t in ("on_demand", "spot") if t in best]

    def _items(self, params: dict[str, str]) -> list[dict[str, Any]]:
        page = self._get(self._url, params)
        items = list(page.get("Items") or [])
        guard = Pages("Retail Prices", httpx.URL(self._url))
        while page.get("NextPageLink"):
            page = self._get(guard.next(str(page["NextPageLink"])), None)
            items += page.get("Items") or []
        return items

    def _get(self, url: str, params: dict[str, str] | None) -> dict[str, Any]:
        return request_json(
            lambda: self._http.get(url, params=params),
            what="Retail Prices",
            max_attempts=self._max_attempts,
            backoff_s=0.5,
            sleep=self._sleep,
            error=lambda r: (f"http{r.status_code}", r.text[:200]),
        )
