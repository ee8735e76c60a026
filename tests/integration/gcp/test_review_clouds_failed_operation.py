"""Review (clouds): an insert whose zonal operation ends DONE with a server-side error (GCP's ``httpErrorStatusCode``
500 or 503, ``INTERNAL_ERROR``): a failure of the moment at GCP, not a refusal of the order."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
LINK = "https://www.googleapis.com/compute/v1/projects/fleet-prod/zones/us-east-1-a"


class _InsertsFailInternally(httpx.BaseTransport):
    """Forwards every call to the fake but the inserts, whose operation GCP ends DONE with an internal error (nothing
    is created: the insert never reaches the fake)."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            now = datetime.now(UTC).isoformat()
            op = {"kind": "compute#operation", "name": "operation-1-internal", "operationType": "insert",
                  "status": "DONE", "progress": 100, "insertTime": now, "startTime": now, "endTime": now,
                  "zone": LINK, "selfLink": f"{LINK}/operations/operation-1-internal",
                  "error": {"errors": [{"code": "INTERNAL_ERROR",
                                        "message": "Internal error. Please try again or contact Google Support."}]},
                  "httpErrorStatusCode": 500, "httpErrorMessage": "INTERNAL SERVER ERROR"}  # fmt: skip
            return httpx.Response(200, json=op)
        return self._inner.handle_request(request)


def test_review_an_operation_failed_by_gcp_itself_keeps_the_reservation_approved(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: ``GcpReservations._follow`` raises a failed operation's error as a refusal that is
    retryable only
    for ZONE_RESOURCE_POOL_EXHAUSTED; an operation GCP failed on its side (``httpErrorStatusCode`` 500,
    INTERNAL_ERROR: "please try again") cancels the approved reservation for good, as if the order itself were
    refused. Expected: a retryable refusal (5xx and 429 of an operation, as of a call): the reservation stays approved
    and the next reconciler pass buys it once GCP is well again."""
    server = gcp_server()
    api = server.services.provider._api  # type: ignore[attr-defined]
    healthy = api._http
    api._http = httpx.Client(base_url=healthy.base_url, timeout=healthy.timeout, transport=_InsertsFailInternally())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").status_code == 200
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "INTERNAL_ERROR"
    assert status(server, rid) == "approved", "GCP's own internal error cancelled the reservation"
    api._http = healthy
    assert reconcile(server)["submitted"] == [rid] and len(fake_gcp.future_reservations) == 1
