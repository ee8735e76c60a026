"""GCP's list prices from the Cloud Billing Catalog API into the catalog, against the discovery-validated fake
(fake_billing.py): a GPU VM's hourly price is its GPU SKU x GPUs + its family's core SKU x vCPUs + its RAM SKU x GiB
(A4: the bundled "1 gpu slice" SKU x GPUs), per GPU, on-demand (usageType OnDemand) and spot (Preemptible); only the
exact descriptions count (no Mega/Plus GPU, commitment, DWS or reserved SKU); the pricing effective now; one catalog
read serves every region and SKU; hostile answers skip the item or refuse clearly, never a traceback or a wrong price;
over HTTP the sync writes the GCP pools, audited.

EVERY PRICE HERE IS INVENTED for the tests: no Google price list is available offline, and none is Google's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from gpufleet.adapters.gcp.prices import SOURCE, GcpCatalogPrices
from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi
from gpufleet.adapters.price_port import PriceQuote
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.domain.errors import ValidationError
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, LiveServer
from tests.integration.gcp.fake_billing import FakeBilling, money, pricing
from tests.integration.gcp.fake_gcp import FakeGcp

EMEA = ("europe-west4",)
H100_GPU = "Nvidia H100 80GB GPU running in Americas"
Page = dict[str, Any]


def _seed(fake: FakeBilling) -> None:
    """INVENTED prices (not Google's), in the shapes of Compute Engine's SKU descriptions."""
    add = fake.add_sku
    add(H100_GPU, "10")
    add("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas", "3.5", usage_type="Preemptible")
    add("A3 Instance Core running in Americas", "0.03", group="CPU")
    add("A3 Instance Ram running in Americas", "0.0025", unit="GiBy.h", group="RAM")
    add("Spot Preemptible A3 Instance Core running in Americas", "0.01", usage_type="Preemptible", group="CPU")
    add("Spot Preemptible A3 Instance Ram running in Americas", "0.001", usage_type="Preemptible", unit="GiBy.h",
        group="RAM")  # fmt: skip
    # not the a3-highgpu-8g's GPU, nor an on-demand or spot price: never counted
    add("Nvidia H100 80GB Mega GPU running in Americas", "50")
    add("Nvidia H100 80GB Plus GPU running in Americas", "50")
    add("Commitment v1: Nvidia H100 80GB GPU running in Americas for 1 Year", "1", usage_type="Commit1Yr")
    add("Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas", "1")
    add("Reserved Nvidia H100 80GB GPU running in Americas", "1")
    add("Spot Preemptible A3 Instance Core running in Americas", "0.0001", group="CPU")  # usageType says OnDemand
    add("A3 Instance Core running in Americas", "0.0002", usage_type="Preemptible", group="CPU")  # and the reverse
    add("Nvidia H100 80GB GPU running in EMEA", "12", regions=EMEA)
    add("A3 Instance Core running in EMEA", "0.04", regions=EMEA, group="CPU")  # no A3 RAM in EMEA
    add("Nvidia L4 GPU running in Americas", "0.5")
    add("G2 Instance Core running in Americas", "0.02", group="CPU")
    add("G2 Instance Ram running in Americas", "0.002", unit="GiBy.h", group="RAM")
    add("A4 Nvidia B200 (1 gpu slice) running in Americas", "16")
    add("Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas", "6.5", usage_type="Preemptible")
    add("H200 141GB GPU running in Americas", "9")
    add("A3 Ultra Instance Core running in Americas", "0.04", group="CPU")
    add("A3 Ultra Instance Ram running in Americas", "0.003", unit="GiBy.h", group="RAM")
    add("Nvidia Tesla A100 80GB GPU running in Americas", "4")  # no A2 core or RAM listed


# (8 x 10 + 208 vCPU x 0.03 + 1872 GiB x 0.0025) / 8 and (8 x 3.5 + 208 x 0.01 + 1872 x 0.001) / 8
H100_ON_DEMAND, H100_SPOT = Decimal("11.365"), Decimal("3.994")


def _prices(fake: FakeBilling, slept: list[float] | None = None, **kw: Any) -> GcpCatalogPrices:
    config = GcpConfig(project="fleet-prod", regions=("us-central1", *EMEA), endpoint_url=fake.url, credentials="none")
    sleep = (slept if slept is not None else []).append
    return GcpCatalogPrices(GoogleApi(config, root=f"{fake.url}/v1/", token=lambda: "test-token", sleep=sleep), **kw)


def test_the_gpu_vm_prices_per_gpu(fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    fake_billing.page_size = 4  # every page followed
    fake_billing.throttle_next()
    slept: list[float] = []
    prices = _prices(fake_billing, slept)
    assert prices.provider == "gcp" and prices.regions == ("us-central1", "europe-west4")
    assert set(prices.skus()) == {"b200", "h200_141gb", "h100_80gb", "a100_80gb", "l4"}
    assert prices.quotes("us-central1", "h100_80gb", now_s=NOW_S) == [
        PriceQuote("on_demand", H100_ON_DEMAND, SOURCE),
        PriceQuote("spot", H100_SPOT, SOURCE),
    ]
    assert prices.quotes("us-central1", "l4", now_s=NOW_S) == [  # (8 x 0.5 + 96 x 0.02 + 384 x 0.002) / 8
        PriceQuote("on_demand", Decimal("0.836"), SOURCE)
    ]
    assert prices.quotes("us-central1", "b200", now_s=NOW_S) == [  # the slice bundles the GPU's vCPUs and RAM
        PriceQuote("on_demand", Decimal("16"), SOURCE),
        PriceQuote("spot", Decimal("6.5"), SOURCE),
    ]
    assert prices.quotes("us-central1", "h200_141gb", now_s=NOW_S) == [  # (72 + 224 x 0.04 + 2952 x 0.003) / 8
        PriceQuote("on_demand", Decimal("11.227"), SOURCE)
    ]
    assert prices.quotes("us-central1", "a100_80gb", now_s=NOW_S) == []  # a part not listed: no price at all
    assert prices.quotes("europe-west4", "h100_80gb", now_s=NOW_S) == []  # no A3 RAM there
    assert prices.quotes("asia-east1", "h100_80gb", now_s=NOW_S) == []
    n_skus = len(fake_billing.skus)
    pages = -(-n_skus // 4)
    assert fake_billing.calls["skus.list"] == pages + 1 and len(slept) == 1  # one catalog read, one 429 retried
    assert all(q.get("currencyCode") == "USD" for q in fake_billing.requests)
    assert [q.get("pageToken") for q in fake_billing.requests[2:]] == [f"p{4 * i}x" for i in range(1, pages)]


def test_the_catalog_is_read_again_after_the_cache_time(fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    clock = [100.0]
    prices = _prices(fake_billing, cache_s=300, monotonic=lambda: clock[0])
    assert prices.quotes("us-central1", "h100_80gb", now_s=NOW_S)[0].usd_per_gpu_h == H100_ON_DEMAND
    fake_billing.skus[0]["pricingInfo"] = [pricing("18")]
    clock[0] += 299
    assert prices.quotes("us-central1", "h100_80gb", now_s=NOW_S)[0].usd_per_gpu_h == H100_ON_DEMAND
    clock[0] += 2  # read again: the GPU at 18, 8 more per GPU
    assert prices.quotes("us-central1", "h100_80gb", now_s=NOW_S)[0].usd_per_gpu_h == Decimal("19.365")
    assert fake_billing.calls["skus.list"] == 2


def test_the_pricing_effective_now_is_taken(fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    fake_billing.skus[0]["pricingInfo"] = [
        pricing("99", effective="2026-02-01T00:00:00Z"),  # not yet in force (after NOW_S, 2026-01-01)
        pricing("12", effective="2025-06-01T00:00:00-07:00"),
        pricing("10", effective="2025-12-31T23:59:59.5Z"),
    ]
    assert _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S)[0] == PriceQuote(
        "on_demand", H100_ON_DEMAND, SOURCE
    )
    fake_billing.skus[0]["pricingInfo"] = [pricing("99", effective="2026-02-01T00:00:00Z")]
    assert [q.tier for q in _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S)] == ["spot"]


def _h100_gpu(page: Page) -> dict[str, Any]:
    return next(s for s in page["skus"] if s["description"] == H100_GPU)


def _rate(page: Page) -> dict[str, Any]:
    return _h100_gpu(page)["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]  # type: ignore[no-any-return]


def _set_price(**fields: Any) -> Callable[[Page], None]:
    return lambda page: _rate(page)["unitPrice"].update(fields)


GARBLES: dict[str, Callable[[Page], object]] = {
    "units NaN string": _set_price(units="NaN"),
    "units a JSON NaN": _set_price(units=float("nan")),
    "units a float": _set_price(units=10.0),
    "units a bool": _set_price(units=True),
    "negative": lambda p: _rate(p).update(unitPrice=money("-10")),
    "zero": lambda p: _rate(p).update(unitPrice=money("0")),
    "nanos out of range": _set_price(nanos=2_000_000_000),
    "nanos of the other sign": _set_price(nanos=-5),
    "nanos a string": _set_price(nanos="5"),
    "another currency": _set_price(currencyCode="EUR"),
    "converted": lambda p: _h100_gpu(p)["pricingInfo"][0].update(currencyConversionRate=0.9),
    "two tiers": lambda p: _h100_gpu(p)["pricingInfo"][0]["pricingExpression"]["tieredRates"].append(
        {"startUsageAmount": 100, "unitPrice": money("1")}
    ),
    "a tier from 100": lambda p: _rate(p).update(startUsageAmount=100),
    "no tiers": lambda p: _h100_gpu(p)["pricingInfo"][0]["pricingExpression"].update(tieredRates=[]),
    "per month": lambda p: _h100_gpu(p)["pricingInfo"][0]["pricingExpression"].update(usageUnit="GiBy.mo"),
    "no pricingInfo": lambda p: _h100_gpu(p).pop("pricingInfo"),
    "pricingInfo an object": lambda p: _h100_gpu(p).update(pricingInfo={"a": 1}),
    "effectiveTime garbled": lambda p: _h100_gpu(p)["pricingInfo"][0].update(effectiveTime="yesterday"),
    "no effectiveTime": lambda p: _h100_gpu(p)["pricingInfo"][0].pop("effectiveTime"),
    "serviceRegions a string": lambda p: _h100_gpu(p).update(serviceRegions="us-central1 us-east4"),
    "category a string": lambda p: _h100_gpu(p).update(category="Compute"),
    "a second price for the same part": lambda p: p["skus"].append(
        {**_h100_gpu(p), "skuId": "FFFF-0000-0001", "pricingInfo": [pricing("1")]}
    ),
}


@pytest.mark.parametrize("garble", list(GARBLES.values()), ids=list(GARBLES))
def test_an_unreadable_price_part_leaves_that_tier_absent(
    fake_billing: FakeBilling, garble: Callable[[Page], object]
) -> None:
    """The H100 GPU's on-demand SKU is garbled: the on-demand quote is absent (the pool stays as it was), the spot one
    is still right; never a traceback, never a price made of the rest."""
    _seed(fake_billing)
    fake_billing.garble_next(garble)
    assert _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S) == [
        PriceQuote("spot", H100_SPOT, SOURCE)
    ]


def test_the_same_price_listed_twice_is_one_price(fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    fake_billing.garble_next(lambda p: p["skus"].append({**_h100_gpu(p), "skuId": "FFFF-0000-0002"}))
    assert _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S)[0].usd_per_gpu_h == H100_ON_DEMAND


@pytest.mark.parametrize("junk", [None, "sku", 7, [], {"description": 5}, {"category": {"usageType": ["x"]}}])
def test_an_item_that_is_not_a_sku_is_skipped(fake_billing: FakeBilling, junk: Any) -> None:
    _seed(fake_billing)
    fake_billing.garble_next(lambda p: p["skus"].insert(0, junk))
    assert _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S) == [
        PriceQuote("on_demand", H100_ON_DEMAND, SOURCE),
        PriceQuote("spot", H100_SPOT, SOURCE),
    ]


@pytest.mark.parametrize(
    ("garble", "code"),
    [
        (lambda p: p.update(skus={"a": 1}), "bad_answer"),
        (lambda p: p.update(nextPageToken=5), "bad_answer"),
        (lambda p: p.update(nextPageToken="p0x"), "pagination_runaway"),  # the first page's token again: a loop
    ],
)
def test_an_answer_that_is_not_a_sku_list_is_a_clear_refusal(
    fake_billing: FakeBilling, garble: Callable[[Page], object], code: str
) -> None:
    _seed(fake_billing)
    fake_billing.page_size = 4
    fake_billing.garble_next(lambda p: None)
    fake_billing.garble_next(garble)  # the second page
    fake_billing.garble_next(garble)
    with pytest.raises(ProviderRefused) as refused:
        _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S)
    assert refused.value.code == code and "skus.list" in refused.value.message


def test_endless_pages_are_refused(fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    fake_billing.loop_pages()
    with pytest.raises(ProviderRefused) as refused:
        _prices(fake_billing).quotes("us-central1", "h100_80gb", now_s=NOW_S)
    assert refused.value.code == "pagination_runaway" and fake_billing.calls["skus.list"] == 2


def test_a_failed_read_is_not_cached(fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    prices = _prices(fake_billing)
    fake_billing.garble_next(lambda p: p.update(skus="none"))
    with pytest.raises(ProviderRefused):
        prices.quotes("us-central1", "h100_80gb", now_s=NOW_S)
    assert prices.quotes("us-central1", "h100_80gb", now_s=NOW_S)[0].usd_per_gpu_h == H100_ON_DEMAND


def _answering(status: int, body: bytes) -> GcpCatalogPrices:
    config = GcpConfig(project="fleet-prod", endpoint_url="http://127.0.0.1:9/", credentials="none")
    api = GoogleApi(config, root="http://127.0.0.1:9/v1/", token=lambda: "t", sleep=lambda _s: None)
    api._http = httpx.Client(  # type: ignore[attr-defined]
        base_url="http://127.0.0.1:9/v1/",
        transport=httpx.MockTransport(lambda _r: httpx.Response(status, content=body)),
    )
    return GcpCatalogPrices(api)


def test_a_proxy_page_is_no_answer_and_a_permission_error_names_the_settings() -> None:
    with pytest.raises(ProviderTimeout, match=r"skus\.list: 200 answer is not JSON"):
        _answering(200, b"<html>proxy login</html>").quotes("us-central1", "h100_80gb", now_s=NOW_S)
    denied = (
        b'{"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "Cloud Billing API has not been used in '
        b'project 42 before or it is disabled."}}'
    )
    with pytest.raises(ProviderRefused) as refused:
        _answering(403, denied).quotes("us-central1", "h100_80gb", now_s=NOW_S)
    assert refused.value.retryable and "check the IAM roles of gcp_credentials" in refused.value.message


def test_an_unknown_sku_is_a_validation_error(fake_billing: FakeBilling) -> None:
    with pytest.raises(ValidationError, match="l40s"):
        _prices(fake_billing).quotes("us-central1", "l40s", now_s=NOW_S)
    assert fake_billing.calls["skus.list"] == 0


# ---- over HTTP: POST /v1/catalog/prices:sync ---------------------------------------------------------------------
@pytest.fixture
def price_server(
    database: Database, fake_gcp: FakeGcp, fake_billing: FakeBilling
) -> Iterator[Callable[..., LiveServer]]:
    started: list[LiveServer] = []

    def start(**settings: Any) -> LiveServer:
        settings.setdefault("gcp_billing_endpoint_url", f"{fake_billing.url}/v1/")
        s = Settings(db_url=database.url, reconcile_interval_s=0, token_cache_s=0, provider="gcp",
                     gcp_project="fleet-prod", gcp_regions=["us-central1", *EMEA],
                     gcp_endpoint_url=f"{fake_gcp.url}/compute/v1/", gcp_credentials="none", **settings)  # fmt: skip
        server = LiveServer(build_services(s, engine=database.engine, clock=FixedClock(NOW_S))).start()
        started.append(server)
        with server.client("ml_platform_admin", "bob") as c:
            for path, body in (
                ("/v1/providers", {"id": "gcp", "name": "Google Cloud", "kind": "hyperscaler"}),
                ("/v1/regions", {"id": "us-central1", "provider_id": "gcp", "geo": "us"}),  # europe-west4: not stored
            ):
                assert c.post(path, json=body).status_code in (201, 409)
        return server

    yield start
    for server in started:
        server.stop()


def test_the_sync_writes_gcps_prices_into_the_catalog(price_server: Any, fake_billing: FakeBilling) -> None:
    _seed(fake_billing)
    server = price_server()
    with server.client("viewer", "vic") as v:
        assert v.post("/v1/catalog/prices:sync").status_code == 403
    with server.client("finops_admin", "fiona") as c:
        first = c.post("/v1/catalog/prices:sync")
        assert first.status_code == 200, first.text
        again = c.post("/v1/catalog/prices:sync").json()
        od = c.get("/v1/pools/gcp/us-central1/h100_80gb/on_demand").json()
        spot = c.get("/v1/pools/gcp/us-central1/h100_80gb/spot").json()
        audit = c.get("/v1/audit", params={"action": "pool.price_synced"}).json()
    out = first.json()
    assert out["regions"] == ["us-central1"] and out["prices_read"] == 6 and out["skipped"] == []
    assert [(ch["pool"], ch["usd_per_gpu_h"], ch["source"]) for ch in out["changed"]] == [
        ("gcp/us-central1/b200/on_demand", "16", SOURCE),
        ("gcp/us-central1/b200/spot", "6.5", SOURCE),
        ("gcp/us-central1/h100_80gb/on_demand", "11.365", SOURCE),
        ("gcp/us-central1/h100_80gb/spot", "3.994", SOURCE),
        ("gcp/us-central1/h200_141gb/on_demand", "11.227", SOURCE),
        ("gcp/us-central1/l4/on_demand", "0.836", SOURCE),
    ]
    assert again["changed"] == [] and (od["price_usd_per_gpu_h"], spot["price_usd_per_gpu_h"]) == (11.365, 3.994)
    assert spot["preemption_rate_per_h"] == 0.05 and len(audit) == 6
    assert fake_billing.calls["skus.list"] == 1  # one catalog read for both syncs (within the cache time)


def test_without_credentials_or_an_emulator_no_prices_are_read(price_server: Any, fake_billing: FakeBilling) -> None:
    server = price_server(gcp_billing_endpoint_url=None)
    assert server.services.cloud_catalog is None
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/catalog/prices:sync")
    assert r.status_code == 409 and "gcp" in r.json()["detail"]
    assert fake_billing.calls["skus.list"] == 0
