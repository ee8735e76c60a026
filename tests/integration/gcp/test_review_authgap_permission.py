"""Review (authgap): Compute Engine answers a purchase with a permission error (403 ``forbidden``: the service account
lacks ``compute.futureReservations.create``; the newer APIs' ``PERMISSION_DENIED``). That is a configuration error an
operator fixes in minutes, not a refusal of the order: the approved reservation must stay approved and be bought by a
later pass once the permission is there."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.adapters.resource_names import resource_name
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
ZONE = "us-east-1-a"
PERMISSION = "Required 'compute.futureReservations.create' permission for 'projects/p/zones/us-east-1-a'"
DENIALS: dict[str, dict[str, Any]] = {
    "forbidden": {"error": {"code": 403, "message": PERMISSION,
                            "errors": [{"reason": "forbidden", "domain": "global", "message": PERMISSION}]}},
    "PERMISSION_DENIED": {"error": {"code": 403, "message": PERMISSION, "status": "PERMISSION_DENIED"}},
}  # fmt: skip


class _Deny(httpx.BaseTransport):
    """Forwards every call to the fake but those of ``method``, which GCP answers 403 with ``body``."""

    def __init__(self, method: str, body: dict[str, Any]) -> None:
        self._inner = httpx.HTTPTransport()
        self._method = method
        self._body = body

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == self._method:
            return httpx.Response(403, json=self._body)
        return self._inner.handle_request(request)


def _route(server: LiveServer, transport: httpx.BaseTransport | None) -> None:
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=transport)


@pytest.mark.parametrize("code", sorted(DENIALS))
def test_review_a_permission_error_leaves_the_reservation_approved(
    gcp_server: Start, fake_gcp: FakeGcp, code: str
) -> None:
    """Review (fixed), the defect: a 403 ``forbidden`` / ``PERMISSION_DENIED`` on the insert is a non-retryable
    refusal, so the approved reservation is cancelled for good: it has to be proposed and approved again once the
    IAM role is granted. Expected: a retryable refusal naming the permission, the reservation held ``blocked``
    (review(lifecycle): it was left approved, its reason nowhere in the API; audited,
    reported in the reconcile answer's errors), bought on the next pass (now so)."""
    server = gcp_server()
    _route(server, _Deny("POST", DENIALS[code]))
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200, r.text
    assert status(server, rid) == "blocked", f"{code} did not hold the approved reservation"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    detail = refused[0]["detail"]
    assert detail["code"] == code and detail["retryable"] is True and detail["blocked"] is True, detail
    assert "compute.futureReservations.create" in detail["message"] and "gcp_credentials" in detail["message"], detail
    still = reconcile(server)
    assert still["still_pending"] == [rid] and status(server, rid) == "blocked"
    assert [e["reservation_id"] for e in still["errors"]] == [rid] and code in still["errors"][0]["error"], still
    _route(server, None)  # the operator granted the role
    assert reconcile(server)["submitted"] == [rid]
    assert status(server, rid) == "submitted_to_cloud"
    assert resource_name(f"gpufleet-{rid}") in {k[2] for k in fake_gcp.future_reservations}


def test_review_a_permission_error_on_describe_changes_no_order(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (authgap): every read answered 403 ``forbidden`` (the role lost its get permission) leaves every order
    as it was (unknown this pass); the pass after the fix follows them."""
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    fake_gcp.set_procurement_status(ZONE, resource_name(f"gpufleet-{rid}"), "CANCELLED")
    _route(server, _Deny("GET", DENIALS["forbidden"]))
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 200 and r.json()["cancelled"] == [], r.text
    assert status(server, rid) == "submitted_to_cloud"
    _route(server, None)
    assert reconcile(server)["cancelled"] == [rid]
