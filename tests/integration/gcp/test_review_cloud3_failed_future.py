"""Review (cloud3): a GCP future reservation that GCP failed or declined stays under gpufleet's name; the next
submission's ``find`` finds it. After a lost answer that is right (GCP's no is the order's: FAILED comes at the start,
which gpufleet never places again, DECLINED is GCP refusing it; Azure's Declined / FulfillmentFailed are cancelled the
same way); after an insert whose operation failed for the moment, the reservation is to be placed again."""

from __future__ import annotations

from gpufleet.adapters.resource_names import resource_name
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
CAPACITY = {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}


def test_review_a_failed_insert_leaving_a_failed_future_reservation(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the insert's operation ends late in a capacity error (about the moment: the
    reservation goes back to approved, to be placed again) while GCP keeps the future reservation, FAILED, under
    gpufleet's name. The next pass's ``find`` records that leftover as the order and the pass after cancels the
    reservation: never placed again. Expected: the leftover deleted (as Azure deletes a failed one), the order placed
    again under the same name, the reservation submitted."""
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
                          error={"errors": [CAPACITY]})  # fmt: skip
        fake_gcp.future_reservation(ZONE, name)["status"]["procurementStatus"] = "FAILED"
    fake_gcp.hold_operations(False)
    assert reconcile(server)["errors"]  # back to approved: about the moment
    assert reconcile(server)["submitted"] == [rid]
    reconcile(server)
    assert status(server, rid) == "submitted_to_cloud"
    fr = fake_gcp.future_reservation(ZONE, name)
    assert fr["status"]["procurementStatus"] == "PENDING_APPROVAL", fr  # placed again
