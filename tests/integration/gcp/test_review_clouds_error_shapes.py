"""Review (clouds): an error answer whose ``error`` is not the object Google documents (a proxy or gateway in front of
the API: ``{"error": "Forbidden"}``, the OAuth-style ``{"error": "invalid_token", "error_description": ...}``)."""

from __future__ import annotations

import httpx

from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


class _ProxyRefusesInserts(httpx.BaseTransport):
    """Forwards every call to the fake but the inserts, which a proxy answers 403 with a string ``error``."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            return httpx.Response(403, json={"error": "Forbidden", "error_description": "blocked by egress policy"})
        return self._inner.handle_request(request)


def test_review_a_string_error_is_a_refusal_not_a_server_error(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: ``gcp/session._error`` reads ``body["error"]`` as an object; a string there raises
    AttributeError out of the port, past ProviderOrders (which handles only the port's outcomes): the approval answers
    500 and the audit says nothing. Expected: a refusal with the HTTP status as its code (403: a permission on our side, the
    reservation held ``blocked`` with the reason; it was cancelled before review(lifecycle))."""
    server = gcp_server()
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=_ProxyRefusesInserts())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200, r.text
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "http403" and "Forbidden" in refused[0]["detail"]["message"]
    # a 403 is a permission on our side (review(lifecycle)): the approved reservation is held, not cancelled
    assert status(server, rid) == "blocked" and fake_gcp.reservations == {} == fake_gcp.future_reservations
