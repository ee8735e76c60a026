"""Review (clouds): an ARM error answer whose ``error`` is not the object ARM documents (a proxy or gateway in front of
management.azure.com: ``{"error": "Forbidden"}``)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.reservation_flow import approve, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}


class _ProxyRefusesPuts(httpx.BaseTransport):
    """Forwards every call to the fake but the PUTs, which a proxy answers 403 with a string ``error``."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            return httpx.Response(403, json={"error": "Forbidden", "error_description": "blocked by egress policy"})
        return self._inner.handle_request(request)


def test_review_a_string_error_is_a_refusal_not_a_server_error(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``azure/session._error`` reads ``body["error"]`` as an object; a string there raises
    AttributeError out of the port, past ProviderOrders (which handles only the port's outcomes): the approval answers
    500 and the audit says nothing. Expected: a refusal with the HTTP status as its code (403: a permission on our side, the
    reservation held ``blocked`` with the reason; it was cancelled before review(lifecycle))."""
    server = azure_server()
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=_ProxyRefusesPuts())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200, r.text
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "http403" and "Forbidden" in refused[0]["detail"]["message"]
    # a 403 is a permission on our side (review(lifecycle)): the approved reservation is held, not cancelled
    assert status(server, rid) == "blocked" and fake_azure.reservations == {}
