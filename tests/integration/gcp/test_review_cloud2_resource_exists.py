"""Review (cloud2): a GCP answer that says an order failed, or is not gpufleet's, while the reservation under
gpufleet's name exists at GCP (billed from its creation): gpufleet must never cancel an order GCP holds."""

from __future__ import annotations

import json
from typing import Any

import httpx

from gpufleet.adapters.resource_names import resource_name
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import PROJECT, Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
INVALID = {"code": "INVALID_FIELD_VALUE", "message": "Invalid value for field 'resource.specificSkuProperties'"}


class _InsertErrorButCreated(httpx.BaseTransport):
    """The inserts reach the fake (the future reservation is created) but their operation is answered DONE with an
    error of the order itself: an answer that contradicts the resource GCP holds."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        got = self._inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            op = json.loads(got.read())
            op |= {"status": "DONE", "progress": 100, "error": {"errors": [INVALID]},
                   "httpErrorStatusCode": 400, "httpErrorMessage": "BAD REQUEST"}  # fmt: skip
            return httpx.Response(200, json=op)
        return got


def _changes(server: LiveServer, rid: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get(
            "/v1/audit", params={"entity_id": rid, "action": "reservation.status_changed"}
        ).json()
    return [e["detail"] for e in got]


def test_review_an_insert_error_with_the_reservation_created_records_the_order(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: the insert's operation ends with an error of the order (INVALID_FIELD_VALUE), yet the
    future reservation under gpufleet's name, with its key, exists at GCP: ``create`` raises the operation's error,
    the reservation is cancelled, and the order GCP holds (and bills) is followed by nobody. Expected: the resource
    decides: the order is recorded (submitted_to_cloud), never cancelled while it exists."""
    server = gcp_server()
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=_InsertErrorButCreated())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    approve(server, rid, "finops_admin", "alice")
    name = resource_name(f"gpufleet-{rid}")
    assert (PROJECT, ZONE, name) in fake_gcp.future_reservations
    assert status(server, rid) == "submitted_to_cloud"
    with server.client("viewer", "vic") as c:
        assert c.get(f"/v1/reservations/{rid}").json()["provider_order_id"] == f"{ZONE}/futureReservations/{name}"


def test_review_a_late_operation_error_with_the_reservation_there_keeps_the_order(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: the insert outlives ``gcp_operation_wait_s`` (recorded submitted_to_cloud with its
    operation), then the operation ends with an error of the order while the future reservation stays at GCP
    (PENDING_APPROVAL, then FULFILLED): ``describe`` reads the operation alone, reports the order ``failed``, the
    reservation is cancelled and its order id cleared, so the reservation GCP fulfils and bills is lost to gpufleet.
    Expected: the resource decides; the operation's error is only a warning, and the order follows GCP's state."""
    server = gcp_server(gcp_operation_wait_s=0.2)
    fake_gcp.hold_operations()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    with fake_gcp.lock:  # the operation ends in an error; the resource stays
        for key, op in fake_gcp.operations.items():
            if op["status"] != "DONE":
                fake_gcp.pending.pop(key, None)
                op.update(status="DONE", progress=100, httpErrorStatusCode=400, httpErrorMessage="BAD REQUEST",
                          error={"errors": [INVALID]})  # fmt: skip
    fake_gcp.hold_operations(False)
    out = reconcile(server)
    assert status(server, rid) == "submitted_to_cloud", (out, _changes(server, rid))
    assert any("INVALID_FIELD_VALUE" in w for w in out["warnings"]), out
    fake_gcp.set_procurement_status(ZONE, name, "FULFILLED")
    assert reconcile(server)["activated"] == [rid] and status(server, rid) == "active"


def test_review_an_edited_description_holds_the_order_rather_than_cancel_it(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: ``find`` identifies gpufleet's order by the key in the resource's ``description``, which
    anyone with ``compute.futureReservations.update`` edits; the insert's answer is lost, someone edits the
    description, and the next pass's ``find`` raises a non-retryable ``alreadyExists``: the approved reservation is
    cancelled while its future reservation, under gpufleet's name (derived from the key with its hash), is at GCP.
    Azure holds such an order ``blocked`` (``name_taken``); expected the same here, and the order recorded once the
    description is restored."""
    server = gcp_server(provider_timeout_s=1.0, gcp_max_attempts=1, provider_max_attempts=1)
    fake_gcp.delay_next("futureReservations.insert", 2.0)  # performed at GCP, the answer lost
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    fr = fake_gcp.future_reservation(ZONE, resource_name(f"gpufleet-{rid}"))
    written = fr["description"]
    fr["description"] = "H100s for the Q1 training runs (ask #ml-infra)"
    out = reconcile(server)
    assert status(server, rid) == "blocked", (out, _changes(server, rid))
    with server.client("viewer", "vic") as c:
        assert "name_taken" in c.get(f"/v1/reservations/{rid}").json()["status_reason"]
    fr["description"] = written
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"
    assert len(fake_gcp.future_reservations) == 1


def test_review_a_late_capacity_error_with_the_resource_failing_is_tried_again(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (holds): the resource decides only while it holds something. A late ZONE_RESOURCE_POOL_EXHAUSTED whose
    future reservation GCP is still showing as FAILED (gone or going) is the operation's refusal, about the moment:
    back to approved and placed again by a later pass, not cancelled as "provider state FAILED"."""
    server = gcp_server(gcp_operation_wait_s=0.2)
    fake_gcp.hold_operations()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    with fake_gcp.lock:
        for key, op in fake_gcp.operations.items():
            if op["status"] != "DONE":
                fake_gcp.pending.pop(key, None)
                op.update(status="DONE", progress=100, httpErrorStatusCode=503, httpErrorMessage="SERVICE UNAVAILABLE",
                          error={"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}]})  # fmt: skip
    fake_gcp.set_procurement_status(ZONE, name, "FAILED")
    fake_gcp.hold_operations(False)
    reconcile(server)
    assert status(server, rid) == "approved", _changes(server, rid)
