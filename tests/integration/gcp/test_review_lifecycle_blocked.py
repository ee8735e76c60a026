"""Review (lifecycle): an approved reservation (one or two approvers signed it) refused by GCP for a permission on
gpufleet's side, in shapes the permission codes do not name: a proxy's 403 page, a permission error inside a failed
operation. Fixing the permission must resume it; nothing may be lost."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
LINK = "https://www.googleapis.com/compute/v1/projects/fleet-prod/zones/us-east-1-a"


class _ProxyPage(httpx.BaseTransport):
    """A proxy in front of the API answers the inserts 403 with an HTML page."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            page = "<html><body><h1>403 Forbidden</h1>egress to compute.googleapis.com denied</body></html>"
            return httpx.Response(403, text=page, headers={"Content-Type": "text/html"})
        return self._inner.handle_request(request)


class _OperationDenied(httpx.BaseTransport):
    """The inserts are answered with an operation that ended DONE with a permission error (nothing created)."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            now = datetime.now(UTC).isoformat()
            op = {"kind": "compute#operation", "name": "operation-1-denied", "operationType": "insert",
                  "status": "DONE", "progress": 100, "insertTime": now, "startTime": now, "endTime": now,
                  "zone": LINK, "selfLink": f"{LINK}/operations/operation-1-denied",
                  "error": {"errors": [{"code": "PERMISSION_DENIED", "message":
                                        "Required 'compute.instances.create' permission for 'projects/shared'"}]},
                  "httpErrorStatusCode": 403, "httpErrorMessage": "FORBIDDEN"}  # fmt: skip
            return httpx.Response(200, json=op)
        return self._inner.handle_request(request)


def _route(server: LiveServer, transport: httpx.BaseTransport | None) -> None:
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=transport)


@pytest.mark.parametrize("transport", [_ProxyPage, _OperationDenied], ids=["proxy_page", "operation_denied"])
def test_review_a_permission_refusal_holds_the_approved_reservation(
    gcp_server: Start, fake_gcp: FakeGcp, transport: type[httpx.BaseTransport]
) -> None:
    """Review (fixed), the defect: a 403 whose body is not Google's error (``http403``) and an operation failed with
    PERMISSION_DENIED (``httpErrorStatusCode`` 403) are non-retryable refusals: the approved reservation is
    cancelled, and must be proposed and approved again. Expected: held as ``blocked`` with the provider's reason
    (in the API and the audit), tried on each pass, submitted once the permission is fixed."""
    server = gcp_server()
    _route(server, transport())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").status_code == 200
    assert status(server, rid) == "blocked"
    with server.client("viewer", "vic") as c:
        seen = c.get(f"/v1/reservations/{rid}").json()
        held = c.get("/v1/reservations", params={"status": "blocked"}).json()
    assert "403" in seen["status_reason"] or "PERMISSION_DENIED" in seen["status_reason"], seen
    assert [r["reservation_id"] for r in held] == [rid]
    assert reconcile(server)["still_pending"] == [rid] and status(server, rid) == "blocked"
    _route(server, None)  # the operator fixed the permission
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"
    assert len(fake_gcp.future_reservations) == 1
