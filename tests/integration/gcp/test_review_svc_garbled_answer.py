"""Review (fixed): a 2xx answer to a mutation whose body cannot be read (a proxy's HTML page, a truncated body) is
turned by ``adapters/http_retry.json_object`` into ``ProviderRefused("bad_answer")``, non-retryable. For
``reservations.insert`` GCP *did* run the request (it answered 2xx), so the outcome is known-done or at worst unknown,
never "refused, nothing bought": the service cancels a reservation that exists (and is billed) at GCP."""

from __future__ import annotations

import httpx

from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


class _GarbleInserts(httpx.BaseTransport):
    """Forwards every call to the fake; the answer of an insert (performed by the fake) reaches us garbled."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.garbled = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            response.read()
            self.garbled += 1
            return httpx.Response(200, text="<html>upstream proxy: response truncated</html>")
        return response


def test_review_a_garbled_2xx_insert_answer_does_not_cancel_what_gcp_created(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: the insert succeeded at GCP (2xx) but its body was unreadable; the port raises a
    non-retryable refusal and ProviderOrders cancels the approved reservation, while GCP holds it. Expected: the
    reservation is not cancelled (unknown outcome at worst) and the reconciler's next pass finds it by name."""
    server = gcp_server()
    port = server.services.provider
    api = port._api  # type: ignore[attr-defined]
    garble = _GarbleInserts()
    healthy = api._http
    api._http = httpx.Client(base_url=healthy.base_url, timeout=healthy.timeout, transport=garble)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    approve(server, rid, "finops_admin", "alice")
    assert garble.garbled == 1
    assert len(fake_gcp.future_reservations) + len(fake_gcp.reservations) == 1  # GCP created it
    api._http = healthy
    assert status(server, rid) != "cancelled", "a 2xx insert with an unreadable body cancelled what GCP created"
    reconcile(server)
    assert status(server, rid) == "submitted_to_cloud"
