"""Review (lifecycle): a GCP insert answered pending (its zonal operation still running when ``gcp_operation_wait_s``
ends) whose operation then fails. GCP removes the reservation it was creating; only the operation says why."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import PROJECT, Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
CAPACITY = {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}
INVALID = {"code": "INVALID_FIELD_VALUE", "message": "Invalid value for field 'resource.specificSkuProperties'"}
DENIED = {"code": "PERMISSION_DENIED", "message": "Required 'compute.reservations.create' permission"}


def _fail_running_operations(fake: FakeGcp, name: str, error: dict[str, str], http: int, word: str) -> None:
    """What GCP does when the insert fails after it was answered: the operation ends DONE with the error and the
    resource being created is gone."""
    with fake.lock:
        for key, op in fake.operations.items():
            if op["status"] != "DONE":
                fake.pending.pop(key, None)
                op.update(status="DONE", progress=100, httpErrorStatusCode=http, httpErrorMessage=word,
                          error={"errors": [error]})  # fmt: skip
        fake.future_reservations.pop((PROJECT, ZONE, name), None)
        fake.reservations.pop((PROJECT, ZONE, name), None)


def _pending(gcp_server: Start, fake: FakeGcp) -> tuple[LiveServer, str, str]:
    server = gcp_server(gcp_operation_wait_s=0.2)
    fake.hold_operations()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    return server, rid, resource_name(f"gpufleet-{rid}")


def _changes(server: LiveServer, rid: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.status_changed"}).json()
    return [e["detail"] for e in got]


def test_review_a_late_capacity_failure_is_tried_again(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the insert's operation outlives ``gcp_operation_wait_s`` (the reservation is recorded
    submitted_to_cloud), then fails with ZONE_RESOURCE_POOL_EXHAUSTED; the next pass describes the order, finds no
    resource (NOT_FOUND) and cancels the reservation for good, though the same failure inside ``op_wait_s`` keeps it
    approved. Expected: the pass reads the recorded operation, puts the reservation back to approved (audited with
    GCP's code), and a later pass places it again."""
    server, rid, name = _pending(gcp_server, fake_gcp)
    _fail_running_operations(fake_gcp, name, CAPACITY, 503, "SERVICE UNAVAILABLE")
    fake_gcp.hold_operations(False)
    out = reconcile(server)
    assert status(server, rid) == "approved", out
    assert [e["reservation_id"] for e in out["errors"]] == [rid] and "ZONE_RESOURCE_POOL_EXHAUSTED" in str(out)
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"
    assert (PROJECT, ZONE, name) in fake_gcp.future_reservations


def test_review_a_late_refusal_cancels_with_the_providers_reason(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: an operation that fails late for the order itself (a bad field) cancels the reservation with
    the reason "provider state NOT_FOUND", as if someone had deleted it; GCP's code is nowhere. Expected: cancelled,
    the status change naming GCP's code."""
    server, rid, name = _pending(gcp_server, fake_gcp)
    _fail_running_operations(fake_gcp, name, INVALID, 400, "BAD REQUEST")
    reconcile(server)
    assert status(server, rid) == "cancelled"
    assert "INVALID_FIELD_VALUE" in _changes(server, rid)[-1]["reason"]


def test_review_a_late_permission_failure_holds_the_reservation(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: an operation that fails late with a permission error (403 inside the operation) cancels the
    approved reservation. Expected: held as ``blocked`` with GCP's reason, placed again once the permission is
    there."""
    server, rid, name = _pending(gcp_server, fake_gcp)
    _fail_running_operations(fake_gcp, name, DENIED, 403, "FORBIDDEN")
    fake_gcp.hold_operations(False)
    reconcile(server)
    assert status(server, rid) == "blocked"
    with server.client("viewer", "vic") as c:
        assert "PERMISSION_DENIED" in (c.get(f"/v1/reservations/{rid}").json()["status_reason"] or "")
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"


def test_review_a_late_failure_after_a_lost_answer_is_tried_again(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the insert is performed but its answer lost (the reservation stays approved); the next pass finds
    the order by its name (CREATING) and records it without the operation; the operation then fails for capacity:
    the order reads NOT_FOUND and the reservation is cancelled. Expected: tried again, as when the answer came (the
    found order's running insert is read from ``zoneOperations.list``)."""
    server = gcp_server(provider_timeout_s=1.0, gcp_max_attempts=1, provider_max_attempts=1)
    fake_gcp.hold_operations()
    fake_gcp.delay_next("futureReservations.insert", 2.0)  # performed at GCP, the answer lost
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    assert reconcile(server)["submitted"] == [rid]  # found by its name
    _fail_running_operations(fake_gcp, resource_name(f"gpufleet-{rid}"), CAPACITY, 503, "SERVICE UNAVAILABLE")
    fake_gcp.hold_operations(False)
    reconcile(server)
    assert status(server, rid) == "approved"
