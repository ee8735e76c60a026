"""Review (clouds): the reconciler follows every submitted GCP order in one ``describe``; GCP refuses the read of one
of them (403 ``forbidden``: an IAM deny policy on one zone, a zone taken from the project)."""

from __future__ import annotations

import httpx

from gpufleet.adapters.resource_names import resource_name
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
ZONE = "us-east-1-a"
FORBIDDEN = {"error": {"code": 403, "message": "Required 'compute.futureReservations.get' permission",
                       "errors": [{"reason": "forbidden", "domain": "global", "message": "Required permission"}]}}  # fmt: skip


class _ForbidOne(httpx.BaseTransport):
    """Forwards every call to the fake but the reads of one resource, which GCP answers 403 forbidden."""

    def __init__(self, name: str) -> None:
        self._inner = httpx.HTTPTransport()
        self._name = name

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith(f"/{self._name}"):
            return httpx.Response(403, json=FORBIDDEN)
        return self._inner.handle_request(request)


def _submitted(server: LiveServer) -> str:
    with server.client("finops_admin", "fiona") as c:
        rid = str(c.post("/v1/reservations", json=ORDER).json()["reservation_id"])
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    return rid


def test_review_one_refused_read_leaves_the_other_orders_followed(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: ``describe`` skips an order whose read got no answer (ProviderTimeout) but lets a
    refusal of one read (403) out of the whole call: every reconciler pass ends in that error (POST
    /v1/reservations:reconcile answers 502), and no other GCP order is followed any more (activated, expired, cancelled). Expected: that order is
    unknown this pass (absent, left alone by the service), the others are followed."""
    server = gcp_server()
    refused, other = _submitted(server), _submitted(server)
    api = server.services.provider._api  # type: ignore[attr-defined]
    forbid = _ForbidOne(resource_name(f"gpufleet-{refused}"))
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=forbid)
    fake_gcp.set_procurement_status(ZONE, resource_name(f"gpufleet-{other}"), "FULFILLED")
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 200, r.text
    assert r.json()["activated"] == [other]
    assert status(server, other) == "active" and status(server, refused) == "submitted_to_cloud"
