"""Review (clouds): the reconciler follows every submitted Azure order in one ``describe``; ARM refuses the read of
one of them (403 ``AuthorizationFailed``: a deny assignment on one reservation group)."""

from __future__ import annotations

from typing import Any

import httpx

from gpufleet.adapters.resource_names import resource_name
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}
DENIED = {"error": {"code": "AuthorizationFailed", "message": "The client does not have authorization to perform "
                    "action 'Microsoft.Compute/capacityReservationGroups/capacityReservations/read'"}}  # fmt: skip


class _DenyOne(httpx.BaseTransport):
    """Forwards every call to the fake but the reads of one reservation, which ARM answers 403."""

    def __init__(self, name: str) -> None:
        self._inner = httpx.HTTPTransport()
        self._name = name

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith(f"/capacityReservations/{self._name}"):
            return httpx.Response(403, json=DENIED)
        return self._inner.handle_request(request)


def _submitted(server: LiveServer) -> str:
    with server.client("finops_admin", "fiona") as c:
        rid = str(c.post("/v1/reservations", json=ORDER).json()["reservation_id"])
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    return rid


def test_review_one_refused_read_leaves_the_other_orders_followed(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``describe`` skips an order whose read got no answer (ProviderTimeout) but lets a
    refusal of one read (403 AuthorizationFailed) out of the whole call: every reconciler pass ends in that error (POST
    /v1/reservations:reconcile answers 502), and no other Azure order is followed any more (activated, deleted at its
    term's end). Expected: that order is unknown this pass (absent, left alone), the others are followed."""
    server = azure_server()
    refused, other = _submitted(server), _submitted(server)
    api = server.services.provider._api  # type: ignore[attr-defined]
    deny = _DenyOne(resource_name(f"gpufleet-{refused}"))
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=deny)
    name = resource_name(f"gpufleet-{other}")
    fake_azure.set_reservation_state(name, name, "Live")
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 200, r.text
    assert r.json()["activated"] == [other]
    assert status(server, other) == "active" and status(server, refused) == "submitted_to_cloud"
