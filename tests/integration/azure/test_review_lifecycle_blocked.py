"""Review (lifecycle): Azure Policy denies the capacity reservation (``RequestDisallowedByPolicy``, 403): a policy on
gpufleet's side, not a refusal of the order; the approved reservation must be held, not lost."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}
POLICY = {"error": {"code": "RequestDisallowedByPolicy", "target": "gpufleet-res",
                    "message": "Resource 'gpufleet-res' was disallowed by policy. Policy identifiers: "
                               "'[{\"policyAssignment\":{\"name\":\"Allowed resource types\"}}]'."}}  # fmt: skip


class _PolicyDeniesPuts(httpx.BaseTransport):
    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            return httpx.Response(403, json=POLICY)
        return self._inner.handle_request(request)


def _route(server: LiveServer, transport: httpx.BaseTransport | None) -> None:
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=transport)


def test_review_a_policy_denial_holds_the_approved_reservation(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``RequestDisallowedByPolicy`` is not among the permission codes, so the approved reservation is
    cancelled for good. Expected: ``blocked`` with Azure's reason, submitted by the pass after the policy allows it."""
    server = azure_server()
    _route(server, _PolicyDeniesPuts())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").status_code == 200
    assert status(server, rid) == "blocked"
    with server.client("viewer", "vic") as c:
        assert "RequestDisallowedByPolicy" in c.get(f"/v1/reservations/{rid}").json()["status_reason"]
    _route(server, None)  # the policy now allows it
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"
    assert len(fake_azure.reservations) == 1
