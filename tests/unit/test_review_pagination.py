"""Review (fixed), the defect: every list the new adapters follow (ARM's nextLink, the Retail Prices API's NextPageLink,
Cloud Quotas' nextPageToken) loops for as long as the server hands back a link: a server (or a fault, like the empty
or repeated NextPageLink reported at Azure) that repeats one never ends the loop -- the request thread spins forever,
sending the bearer token each time. Each test's transport gives up after 50 requests with RuntimeError; a bounded
loop raises a port outcome (ProviderRefused/ProviderTimeout) first.

Also: ARM's nextLink is checked for its host only, so the bearer token is sent over plain http (or to another port)
when a nextLink says so."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest

from gpufleet.adapters.azure.prices import AzureRetailPrices
from gpufleet.adapters.azure.session import ArmApi, AzureConfig
from gpufleet.adapters.gcp.quotas import GcpCloudQuotas, gpu_quota
from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout

LIMIT = 50


class Runaway(RuntimeError):
    pass


def _transport(answer: Any, seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) > LIMIT:
            raise Runaway(f"{len(seen)} requests for one list")
        return httpx.Response(200, json=answer(request))

    return httpx.MockTransport(handler)


def _arm(base: str, answer: Any, seen: list[httpx.Request]) -> ArmApi:
    cfg = AzureConfig(subscription_id="sub", resource_group="rg", endpoint_url=base, credentials="none")
    api = ArmApi(cfg, token=lambda: "secret-arm-token", sleep=lambda _s: None)
    api._http = httpx.Client(base_url=base, transport=_transport(answer, seen))
    return api


def test_review_arm_pages_stop_on_a_repeated_next_link() -> None:
    seen: list[httpx.Request] = []
    link = "https://arm.example/subscriptions/sub/providers/Microsoft.Compute/locations/eastus/usages?page=2"
    api = _arm("https://arm.example/", lambda _r: {"value": [], "nextLink": link}, seen)
    with pytest.raises((ProviderRefused, ProviderTimeout)):  # before the fix: Runaway after 51 requests
        api.pages("usage.list", "locations/eastus/usages", scope="subscription")


def test_review_retail_prices_stop_on_a_repeated_next_page_link() -> None:
    seen: list[httpx.Request] = []
    link = "https://prices.example/api/retail/prices?$skip=100"
    client = httpx.Client(transport=_transport(lambda _r: {"Items": [], "NextPageLink": link}, seen))
    prices = AzureRetailPrices(("eastus",), url="https://prices.example/api/retail/prices", client=client)
    with pytest.raises((ProviderRefused, ProviderTimeout)):  # before the fix: Runaway after 51 requests
        prices.quotes("eastus", "h100_80gb", now_s=0)


def test_review_cloud_quotas_list_stops_on_a_repeated_page_token() -> None:
    seen: list[httpx.Request] = []
    cfg = GcpConfig(project="p", endpoint_url="https://quotas.example/v1/", credentials="none")
    api = GoogleApi(cfg, root="https://quotas.example/v1/", sleep=lambda _s: None)
    api._http = httpx.Client(
        base_url="https://quotas.example/v1/",
        transport=_transport(lambda _r: {"quotaPreferences": [], "nextPageToken": "same"}, seen),
    )
    q = gpu_quota("h100_80gb", "on_demand")
    assert q is not None
    with pytest.raises((ProviderRefused, ProviderTimeout)):  # before the fix: Runaway after 51 requests
        GcpCloudQuotas(api, contact_email=None).requests("us-central1", q.code)


@pytest.mark.parametrize(
    "link",
    [
        "http://arm.example/subscriptions/sub/providers/Microsoft.Compute/locations/eastus/usages?page=2",  # plain http
        "https://arm.example:8443/subscriptions/sub/providers/Microsoft.Compute/locations/eastus/usages?page=2",
    ],
)
def test_review_arm_token_never_leaves_the_arm_origin(link: str) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> dict[str, Any]:
        return {"value": [], "nextLink": link} if "page" not in str(request.url) else {"value": []}

    api = _arm("https://arm.example/", answer, seen)
    with contextlib.suppress(ProviderRefused):
        api.pages("usage.list", "locations/eastus/usages", scope="subscription")
    leaked = [
        str(r.url) for r in seen if (r.url.scheme, r.url.port) != ("https", None) and "authorization" in r.headers
    ]
    assert leaked == []  # before the fix: the bearer token went to the nextLink's origin
