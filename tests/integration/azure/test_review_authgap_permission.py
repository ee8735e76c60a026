"""Review (authgap): ARM answers a purchase with a permission error (403 ``AuthorizationFailed``: the identity has no
role with ``Microsoft.Compute/capacityReservationGroups/write``; ``LinkedAuthorizationFailed``: it lacks a permission
on a linked resource). That is a configuration error an operator fixes in minutes, not a refusal of the order: the
approved reservation must stay approved and be bought by a later pass once the role is assigned."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.adapters.providers import OrderRecord
from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.azure.test_azure_adapter import DAY, NOW, Clock, _order, _port
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}
ACTION = "Microsoft.Compute/capacityReservationGroups/write"
DENIALS = {
    "AuthorizationFailed": f"The client 'gpufleet' does not have authorization to perform action '{ACTION}'",
    "LinkedAuthorizationFailed": f"The client has permission to perform action '{ACTION}' on scope 'x', however it "
    "does not have permission to perform action 'Microsoft.Compute/capacityReservationGroups/read' on the linked scope",
}


class _Deny(httpx.BaseTransport):
    """Forwards every call to the fake but those of ``method``, which ARM answers 403 ``code``."""

    def __init__(self, method: str, code: str) -> None:
        self._inner = httpx.HTTPTransport()
        self._method = method
        self._code = code

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == self._method:
            return httpx.Response(403, json={"error": {"code": self._code, "message": DENIALS[self._code]}})
        return self._inner.handle_request(request)


def _route(server: LiveServer, transport: httpx.BaseTransport | None) -> None:
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=transport)


@pytest.mark.parametrize("code", sorted(DENIALS))
def test_review_a_permission_error_leaves_the_reservation_approved(
    azure_server: Any, fake_azure: FakeAzure, code: str
) -> None:
    """Review (fixed), the defect: a 403 ``AuthorizationFailed`` / ``LinkedAuthorizationFailed`` on the PUT is a
    non-retryable refusal, so the approved reservation is cancelled for good: it has to be proposed and approved
    again once the role is assigned. Expected: a retryable refusal naming the setting to check, the reservation held
    ``blocked`` (review(lifecycle): it was left approved; audited, reported in the reconcile answer's errors), bought
    on the next pass (now so)."""
    server = azure_server()
    _route(server, _Deny("PUT", code))
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200, r.text
    assert status(server, rid) == "blocked", f"{code} did not hold the approved reservation"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    detail = refused[0]["detail"]
    assert detail["code"] == code and detail["retryable"] is True and detail["blocked"] is True, detail
    denied = ACTION if code == "AuthorizationFailed" else "Microsoft.Compute/capacityReservationGroups/read"
    assert f"permission denied for {denied}" in detail["message"] and "azure_credentials" in detail["message"], detail
    still = reconcile(server)
    assert still["still_pending"] == [rid] and status(server, rid) == "blocked"
    assert [e["reservation_id"] for e in still["errors"]] == [rid] and code in still["errors"][0]["error"], still
    _route(server, None)  # the operator assigned the role
    assert reconcile(server)["submitted"] == [rid]
    name = resource_name(f"gpufleet-{rid}")
    assert status(server, rid) == "submitted_to_cloud" and fake_azure.reservation(name, name)


def test_review_a_permission_error_on_describe_changes_no_order(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (authgap): every read answered 403 ``AuthorizationFailed`` (the role lost its read) leaves every order
    as it was (unknown this pass); the pass after the fix follows them."""
    server = azure_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    fake_azure.set_reservation_state(name, name, "Live")
    _route(server, _Deny("GET", "AuthorizationFailed"))
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 200 and r.json()["activated"] == [], r.text
    assert status(server, rid) == "submitted_to_cloud"
    _route(server, None)
    assert reconcile(server)["activated"] == [rid]


def test_review_a_permission_error_on_the_term_end_delete_keeps_the_order_active(fake_azure: FakeAzure) -> None:
    """Review (authgap): the reconciler's ``describe`` deletes a reservation whose term is over (Azure bills it until
    deleted); a delete answered 403 ``AuthorizationFailed`` (the role lost its delete) is not reported done: the order
    stays active with the refusal as the reason, and the pass after the fix ends it."""
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock)
    order = _order(NOW + 8 * DAY)  # a future reservation (Azure reports its Live state)
    oid = port.submit("gpufleet-res_authgap", order).order_id
    name = oid.split("/")[1]
    fake_azure.set_reservation_state(name, name, "Live")
    clock.advance(8 * DAY + term_seconds(order.term_months) + 2 * DAY)  # past its term and Azure's commitment
    api = port._api
    api._http = httpx.Client(
        base_url=api._http.base_url, timeout=api._http.timeout, transport=_Deny("DELETE", "AuthorizationFailed")
    )
    record = {oid: OrderRecord(order.start_s + term_seconds(order.term_months))}  # gpufleet's record of the term
    held = port.describe([oid], record)[oid]
    assert (held.state, held.provider_state) == ("active", "Live") and "AuthorizationFailed" in held.reason, held
    assert fake_azure.reservation(name, name)
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout)
    assert port.describe([oid], record)[oid].state == "expired"
