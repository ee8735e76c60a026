"""Azure's list prices from the Retail Prices API into the catalog, against the fake checked by the API's documented
fields: the Linux hourly price of a VM size per GPU for on-demand and spot (Windows, low priority and dev/test
meters left out), every page followed, throttling retried; over HTTP on SQLite and PostgreSQL, the sync writes the
Azure pools, audited, and a second sync changes nothing; the fake's own checks."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest

from gpufleet.adapters.azure.prices import AzureRetailPrices
from gpufleet.adapters.price_port import PriceQuote
from gpufleet.adapters.providers import ProviderRefused
from tests.integration.azure.fake_prices import PATH, FakeRetailPrices
from tests.integration.conftest import NOW_S

H100 = "Standard_ND96isr_H100_v5"


def _seed(fake: FakeRetailPrices) -> None:
    series = "Virtual Machines NDSH100v5 Series"
    fake.add(arm_sku=H100, region="eastus", price=98.32, sku_name="ND96isr H100 v5", product=series)
    fake.add(arm_sku=H100, region="eastus", price=39.33, sku_name="ND96isr H100 v5 Spot", product=series)
    fake.add(arm_sku=H100, region="eastus", price=105.0, sku_name="ND96isr H100 v5", product=f"{series} Windows")
    fake.add(arm_sku=H100, region="eastus", price=19.0, sku_name="ND96isr H100 v5 Low Priority", product=series)
    fake.add(arm_sku=H100, region="eastus", price=60.0, sku_name="ND96isr H100 v5", product=series,
             kind="DevTestConsumption")  # fmt: skip
    fake.add(arm_sku=H100, region="westus3", price=101.0, sku_name="ND96isr H100 v5", product=series)


def test_the_linux_hourly_prices_per_gpu(fake_prices: FakeRetailPrices) -> None:
    _seed(fake_prices)
    fake_prices.page_size = 1  # every page followed
    fake_prices.throttle_next()
    slept: list[float] = []
    prices = AzureRetailPrices(("eastus",), url=f"{fake_prices.url}{PATH}", sleep=slept.append)
    assert prices.quotes("eastus", "h100_80gb", now_s=NOW_S) == [
        PriceQuote("on_demand", Decimal("12.29"), "azure:RetailPrices"),
        PriceQuote("spot", Decimal("4.91625"), "azure:RetailPrices"),
    ]
    assert slept == [1.0] and fake_prices.calls["GET"] == 5  # one 429, then four pages of the Consumption meters
    assert prices.quotes("northeurope", "h100_80gb", now_s=NOW_S) == []  # none listed: both pools left as they are
    assert set(prices.skus()) == {"h100_80gb", "h200_141gb", "a100_80gb"}


def test_a_next_page_on_another_host_is_not_followed() -> None:
    page = {"Items": [], "NextPageLink": "http://elsewhere.example/api/retail/prices?$skip=100"}
    answer = httpx.Client(transport=httpx.MockTransport(lambda _r: httpx.Response(200, json=page)))
    prices = AzureRetailPrices(("eastus",), url="http://127.0.0.1:9/api/retail/prices", client=answer)
    with pytest.raises(ProviderRefused) as refused:
        prices.quotes("eastus", "h100_80gb", now_s=NOW_S)
    assert refused.value.code == "bad_next_link"


def test_the_fake_checks_the_query_and_its_answers(fake_prices: FakeRetailPrices) -> None:
    _seed(fake_prices)
    ok = httpx.get(f"{fake_prices.url}{PATH}", params={"$filter": "armSkuName eq 'Standard_ND96isr_H100_v5'"}).json()
    assert ok["Count"] == 6 and ok["NextPageLink"] is None and ok["CustomerEntityType"] == "Retail"
    case = httpx.get(f"{fake_prices.url}{PATH}", params={"$filter": "armSkuName eq 'standard_nd96isr_h100_v5'"})
    assert case.json()["Count"] == 0  # values are case-sensitive
    for params in ({"$filter": "contains(armSkuName, 'H100')"}, {"$filter": "price eq '1'"}, {"$top": "5"}):
        assert httpx.get(f"{fake_prices.url}{PATH}", params=params).status_code == 400
    assert len(fake_prices.violations) == 3
    fake_prices.violations.clear()
    fake_prices.items[0]["retailPrice"] = "98.32"  # an answer of the wrong type is the fake's own bug
    assert httpx.get(f"{fake_prices.url}{PATH}").status_code == 500
    assert fake_prices.violations == ["Items[0].retailPrice: '98.32' is not of type ['int', 'float']"]
    fake_prices.violations.clear()


def test_the_sync_writes_azures_prices_into_the_catalog(price_server: Any, fake_prices: FakeRetailPrices) -> None:
    _seed(fake_prices)
    server = price_server()
    with server.client("viewer", "vic") as v:
        assert v.post("/v1/catalog/prices:sync").status_code == 403
    with server.client("finops_admin", "fiona") as c:
        first = c.post("/v1/catalog/prices:sync", params={"sku": "h100_80gb"})
        assert first.status_code == 200, first.text
        again = c.post("/v1/catalog/prices:sync", params={"sku": "h100_80gb"}).json()
        od = c.get("/v1/pools/azure/eastus/h100_80gb/on_demand").json()
        spot = c.get("/v1/pools/azure/eastus/h100_80gb/spot").json()
        audit = c.get("/v1/audit", params={"action": "pool.price_synced"}).json()
    out = first.json()
    assert out["regions"] == ["eastus"] and out["prices_read"] == 2
    assert [(ch["pool"], ch["usd_per_gpu_h"], ch["source"]) for ch in out["changed"]] == [
        ("azure/eastus/h100_80gb/on_demand", "12.29", "azure:RetailPrices"),
        ("azure/eastus/h100_80gb/spot", "4.91625", "azure:RetailPrices"),
    ]
    assert again["changed"] == [] and (od["price_usd_per_gpu_h"], spot["price_usd_per_gpu_h"]) == (12.29, 4.91625)
    assert spot["preemption_rate_per_h"] == 0.05 and len(audit) == 2
