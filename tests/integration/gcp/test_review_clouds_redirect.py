"""Review (clouds): an answer of 3xx (an egress proxy redirecting to its login page, an endpoint moved) to a call of
the GCP client. httpx does not follow redirects, so the client gets the 302 itself, usually with an empty body."""

from __future__ import annotations

import httpx

from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


def _proxy_login(request: httpx.Request) -> httpx.Response:
    return httpx.Response(302, headers={"Location": "https://proxy.corp.example/login"})


def test_review_a_redirect_is_not_read_as_an_answer(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: ``http_retry.request_json`` takes every status below 400 as a success and an empty
    body as ``{}``; the lookup by name reads the 302 as a reservation that exists without gpufleet's key ("exists but
    gpufleet did not create it"), a non-retryable refusal: the approved reservation is cancelled though nothing was
    asked of GCP. Expected: no answer from GCP (unknown outcome): the reservation stays approved, and the next pass,
    with the proxy gone, buys it."""
    server = gcp_server()
    api = server.services.provider._api  # type: ignore[attr-defined]
    healthy = api._http
    api._http = httpx.Client(base_url=healthy.base_url, transport=httpx.MockTransport(_proxy_login))
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").status_code == 200
    assert status(server, rid) == "approved", "a proxy's redirect cancelled the reservation"
    api._http = healthy
    assert reconcile(server)["submitted"] == [rid] and len(fake_gcp.future_reservations) == 1
