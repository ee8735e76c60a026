"""Review (fixed), the defect: the clients promise the port's outcomes on failure ("raises the port's outcome on
failure, never httpx's"), but a 2xx answer whose body is not JSON (a proxy's or captive portal's HTML page, a
truncated body) escapes as json.JSONDecodeError: the quota, outlook and price routes answer 500 "internal error"
instead of a 502/504 problem naming the provider."""

from __future__ import annotations

import httpx
import pytest

from gpufleet.adapters.azure.prices import AzureRetailPrices
from gpufleet.adapters.azure.session import ArmApi, AzureConfig
from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout

HTML = httpx.MockTransport(lambda _r: httpx.Response(200, text="<html>Sign in to the proxy</html>"))
OUTCOMES = (ProviderRefused, ProviderTimeout)


def test_review_arm_non_json_answer_is_a_port_outcome() -> None:
    cfg = AzureConfig(
        subscription_id="sub", resource_group="rg", endpoint_url="https://arm.example/", credentials="none"
    )
    api = ArmApi(cfg, sleep=lambda _s: None)
    api._http = httpx.Client(base_url="https://arm.example/", transport=HTML)
    with pytest.raises(OUTCOMES):  # before the fix: json.decoder.JSONDecodeError
        api.pages("usage.list", "locations/eastus/usages", scope="subscription")


def test_review_google_non_json_answer_is_a_port_outcome() -> None:
    cfg = GcpConfig(project="p", endpoint_url="https://quotas.example/v1/", credentials="none")
    api = GoogleApi(cfg, root="https://quotas.example/v1/", sleep=lambda _s: None)
    api._http = httpx.Client(base_url="https://quotas.example/v1/", transport=HTML)
    with pytest.raises(OUTCOMES):  # before the fix: json.decoder.JSONDecodeError
        api.get("quotaInfos.get", "locations/global/services/compute.googleapis.com/quotaInfos/x")


def test_review_retail_prices_non_json_answer_is_a_port_outcome() -> None:
    prices = AzureRetailPrices(
        ("eastus",), url="https://prices.example/api/retail/prices", client=httpx.Client(transport=HTML)
    )
    with pytest.raises(OUTCOMES):  # before the fix: json.decoder.JSONDecodeError
        prices.quotes("eastus", "h100_80gb", now_s=0)
