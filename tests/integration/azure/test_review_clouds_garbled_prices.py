"""Review (clouds): a Retail Prices answer that is JSON but not the documented items (a ``retailPrice`` of ``NaN`` or a
string, which Python's JSON reader takes; an item that is not an object)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.integration.azure.fake_prices import FakeRetailPrices
from tests.integration.azure.test_azure_prices import _seed

Garble = Callable[[dict[str, Any]], None]


class _GarbledItems(httpx.BaseTransport):
    """Forwards every call to the fake; ``garble`` changes the answer's JSON before the adapter reads it."""

    def __init__(self, garble: Garble) -> None:
        self._inner = httpx.HTTPTransport()
        self._garble = garble

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        page = json.loads(response.read())
        self._garble(page)
        return httpx.Response(response.status_code, content=json.dumps(page).encode())  # NaN is written as NaN


def _nan_on_demand(page: dict[str, Any]) -> None:
    for item in page["Items"]:
        if item["skuName"] == "ND96isr H100 v5" and item["armRegionName"] == "eastus":
            item["retailPrice"] = float("nan")


def _string_price_and_a_null_item(page: dict[str, Any]) -> None:
    for item in page["Items"]:
        if item["skuName"] == "ND96isr H100 v5" and item["armRegionName"] == "eastus":
            item["retailPrice"] = "98.32 USD"
    page["Items"].append(None)


@pytest.mark.parametrize("garble", [_nan_on_demand, _string_price_and_a_null_item])
def test_review_an_unreadable_price_item_is_skipped_not_a_server_error(
    price_server: Any, fake_prices: FakeRetailPrices, garble: Garble
) -> None:
    """Review (fixed), the defect: ``AzureRetailPrices.quotes`` takes ``Decimal(str(retailPrice))`` and compares it with
    0: ``NaN`` raises decimal.InvalidOperation, a string ``decimal.InvalidOperation`` at the parse, an item that is not an object
    AttributeError; POST /v1/catalog/prices:sync answers 500 and no price is synced. Expected: the unreadable item is
    skipped like any item that is not a price gpufleet uses; the spot price is synced, the on-demand pool is left as
    it was."""
    _seed(fake_prices)
    server = price_server()
    catalog = server.services.cloud_catalog
    prices = catalog._prices  # type: ignore[attr-defined]
    prices._http = httpx.Client(timeout=prices._http.timeout, transport=_GarbledItems(garble))
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/catalog/prices:sync", params={"sku": "h100_80gb"})
    assert r.status_code == 200, r.text
    assert [(ch["pool"], ch["usd_per_gpu_h"]) for ch in r.json()["changed"]] == [
        ("azure/eastus/h100_80gb/spot", "4.91625")
    ]
