"""Review (clouds): Azure's compute usages as the outlook's quota. A usage whose ``limit`` is negative (-1, as other
quota APIs say "unlimited") or absent is no reading of a quota: the pool keeps its stored quota, as GCP's -1 does."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import NOW_S, LiveServer
from tests.integration.test_api_planning import SKU, _hourly, _ingest

DAY = 86_400
POOL = f"azure/eastus/{SKU}/on_demand"


class _LimitDropped(httpx.BaseTransport):
    """Forwards every call to the fake; the usages' ``limit`` fields are dropped from the answer."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if request.url.path.endswith("/usages"):
            page = httpx.Response(response.status_code, content=response.read()).json()
            for usage in page.get("value") or []:
                usage.pop("limit", None)
            return httpx.Response(response.status_code, json=page)
        return response


def _outlook(server: LiveServer) -> dict[str, Any]:
    with server.client("ml_platform_admin", "bob") as c:
        pool = {"id": POOL, "provider_id": "azure", "region_id": "eastus", "sku_id": SKU, "tier": "on_demand",
                "price_usd_per_gpu_h": "12.29", "quota_gpus": 40}  # fmt: skip
        assert c.post("/v1/pools", json=pool).status_code in (201, 409)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, 6.0))
    with server.client("viewer", "vic") as v:
        r = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 30})
    assert r.status_code == 200, r.text
    return next(p for p in r.json()["pools"] if p["pool"] == POOL)


def test_review_a_negative_limit_is_no_quota_reading(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``AzureComputeQuotas.read`` turns a usage's ``limit`` of -1 into a reading of -1
    vCPUs, which the outlook shows as a quota of -1 GPUs (-1 // 12), exhausted now, with an increase due. Expected: no
    reading; the stored quota (40) applies."""
    server = azure_server()
    fake_azure.set_usage("eastus", "standardNDSH100v5Family", -1)
    pool = _outlook(server)
    assert (pool["quota_source"], pool["quota_gpus"]) == ("stored", 40)


def test_review_a_missing_limit_is_no_quota_reading(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``AzureComputeQuotas.read`` reads a usage without ``limit`` (a garbled answer: ARM's
    Usage requires it) as ``limit`` 0, so the outlook reports a quota of 0 GPUs, exhausted now, instead of the stored
    40. Expected: no reading; the stored quota applies."""
    server = azure_server()
    fake_azure.set_usage("eastus", "standardNDSH100v5Family", 192)
    api = server.services.cloud_quotas._source._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=_LimitDropped())
    pool = _outlook(server)
    assert (pool["quota_source"], pool["quota_gpus"]) == ("stored", 40)
