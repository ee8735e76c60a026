"""The Cloud Billing Catalog fake itself, driven with plain httpx: its pages, and that its checks catch what the
discovery document (cloudbilling.v1.json) does not allow (those tests look at ``violations`` and then empty them, so
the fixture's final check passes). Every price here is invented."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.gcp.fake_billing import COMPUTE, SCHEMAS, FakeBilling, money
from tests.integration.gcp.fake_gcp import validate

AUTH = {"Authorization": "Bearer test-token"}


def _get(fake: FakeBilling, params: dict[str, str] | None = None, service: str = COMPUTE) -> httpx.Response:
    return httpx.get(f"{fake.url}/v1/services/{service}/skus", params=params, headers=AUTH, timeout=10)


def _taken(fake: FakeBilling) -> list[str]:
    out = list(fake.violations)
    fake.violations.clear()
    return out


def test_skus_are_listed_page_by_page(fake_billing: FakeBilling) -> None:
    for n in range(3):
        fake_billing.add_sku(f"Invented GPU {n} running in Americas", "1.5")
    first = _get(fake_billing, {"pageSize": "2", "currencyCode": "USD"}).json()
    assert [s["description"] for s in first["skus"]] == ["Invented GPU 0 running in Americas", "Invented GPU 1 running in Americas"]  # fmt: skip
    rest = _get(fake_billing, {"pageSize": "2", "pageToken": first["nextPageToken"]}).json()
    assert [s["description"] for s in rest["skus"]] == ["Invented GPU 2 running in Americas"]
    assert rest["nextPageToken"] == ""
    sku = rest["skus"][0]
    assert sku["name"] == f"services/{COMPUTE}/skus/{sku['skuId']}" and sku["category"]["usageType"] == "OnDemand"
    rate = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]
    assert rate["unitPrice"] == {"currencyCode": "USD", "units": "1", "nanos": 500_000_000}
    assert fake_billing.calls["skus.list"] == 2


def test_money_keeps_the_sign_and_the_nanos() -> None:
    assert money("0.000000001") == {"currencyCode": "USD", "units": "0", "nanos": 1}
    assert money("-1.75") == {"currencyCode": "USD", "units": "-1", "nanos": -750_000_000}
    assert money("12") == {"currencyCode": "USD", "units": "12", "nanos": 0}


def test_google_refusals_are_not_violations(fake_billing: FakeBilling) -> None:
    assert _get(fake_billing, {"pageToken": "not-ours"}).json()["error"]["status"] == "INVALID_ARGUMENT"
    assert _get(fake_billing, service="0000-0000-0000").status_code == 404
    r = httpx.get(f"{fake_billing.url}/v1/services/{COMPUTE}/skus", timeout=10)
    assert r.status_code == 401 and r.json()["error"]["status"] == "UNAUTHENTICATED"
    fake_billing.throttle_next()
    assert _get(fake_billing).status_code == 429 and _get(fake_billing).status_code == 200
    assert fake_billing.violations == []


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        ({"pageSize": "many"}, "query parameter pageSize='many' is not an integer"),
        ({"currency": "USD"}, "unknown query parameter currency"),
        ({"filter": "description:GPU"}, "unknown query parameter filter"),
    ],
)
def test_the_fake_catches_a_request_the_discovery_document_does_not_allow(
    fake_billing: FakeBilling, params: dict[str, str], expect: str
) -> None:
    assert _get(fake_billing, params).status_code == 400
    found = _taken(fake_billing)
    assert any(expect in v for v in found), found


def test_the_fake_catches_its_own_bad_answer(fake_billing: FakeBilling) -> None:
    sku = fake_billing.add_sku("Invented GPU running in Americas", "2")
    sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]["units"] = 2  # int64 as a number
    assert _get(fake_billing).status_code == 500
    assert _taken(fake_billing) == [
        "skus.list response.skus[0].pricingInfo[0].pricingExpression.tieredRates[0].unitPrice.units: "
        "expected a JSON string (int64), got int 2"
    ]


def test_the_validator_reads_the_billing_schemas() -> None:
    bad = {"skuId": 7, "category": {"usageType": "OnDemand", "colour": "blue"}, "geoTaxonomy": {"type": "PLANET"}}
    found = validate(bad, "Sku", "sku", response=True, schemas=SCHEMAS)
    for expect in ("sku.skuId: expected a JSON string", "sku.category.colour: unknown field", "'PLANET' is not one"):
        assert any(expect in v for v in found), (expect, found)
    info = {"effectiveTime": "yesterday", "pricingExpression": {"tieredRates": [{"unitPrice": {"nanos": 2**40}}]}}
    found = validate(info, "PricingInfo", "p", response=True, schemas=SCHEMAS)
    assert any("'yesterday' is not an RFC 3339" in v for v in found) and any("out of int32 range" in v for v in found)


def test_hostile_answers_are_served_after_the_check(fake_billing: FakeBilling) -> None:
    fake_billing.add_sku("Invented GPU running in Americas", "2")
    fake_billing.garble_next(lambda page: page.update(skus="none"))
    assert _get(fake_billing).json()["skus"] == "none"
    fake_billing.loop_pages()
    assert _get(fake_billing).json()["nextPageToken"] == "p0x"
    assert fake_billing.violations == []
