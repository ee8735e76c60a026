"""Review (clouds): a reservation insert whose zonal operation is still running when ``op_wait_s`` ends, and then
fails for lack of capacity (ZONE_RESOURCE_POOL_EXHAUSTED): GCP removes the reservation it was creating."""

from __future__ import annotations

from gpufleet.adapters.gcp.reservations import GcpReservations
from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi
from gpufleet.adapters.providers import OrderRecord, OrderRequest
from gpufleet.adapters.resource_names import resource_name
from tests.integration.gcp.fake_gcp import FakeGcp

ZONE = "us-central1-a"
NOW = 1_767_225_600  # 2026-01-01
PROJECT = "fleet-prod"


def _fail_running_operations_for_capacity(fake: FakeGcp, name: str) -> None:
    """What GCP does when the capacity runs out while the insert runs: the operation ends DONE with the error, the
    reservation being created is gone."""
    with fake.lock:
        for key, op in fake.operations.items():
            if op["status"] != "DONE":
                fake.pending.pop(key, None)
                op.update(status="DONE", progress=100, httpErrorStatusCode=503, httpErrorMessage="SERVICE UNAVAILABLE",
                          error={"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}]})  # fmt: skip
        fake.reservations.pop((PROJECT, ZONE, name))


def test_review_a_late_capacity_failure_is_not_a_cancellation(fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the same ZONE_RESOURCE_POOL_EXHAUSTED is a retryable refusal when the insert's
    operation fails within ``op_wait_s`` (the reservation stays approved, the reconciler tries again), but a
    cancellation when it fails later: ``submit`` has returned the order (pending), and ``describe`` then finds no
    reservation and reports it ``cancelled``/NOT_FOUND, so the service cancels the reservation for good. Now the
    order carries the running operation (``operation_id``, kept in the store while submitted), ``describe`` given it
    back reads the operation first, and reports the order ``failed`` with the retryable refusal (the service puts the
    reservation back to approved: tests/integration/gcp/test_review_lifecycle_late_failure.py)."""
    api = GoogleApi(GcpConfig(project=PROJECT, endpoint_url=f"{fake_gcp.url}/compute/v1/", credentials="none"))
    port = GcpReservations(api, now_s=lambda: NOW, op_wait_s=0.2, poll_s=0.05)
    fake_gcp.hold_operations()
    order = port.submit("gpufleet-res_late1", OrderRequest("h100_80gb", "us-central1", 8, 1, NOW))
    assert order.operation_id is not None
    _fail_running_operations_for_capacity(fake_gcp, resource_name("gpufleet-res_late1"))
    seen = port.describe([order.order_id], {order.order_id: OrderRecord(NOW + 730 * 3600, order.operation_id)})
    got = seen[order.order_id]
    assert got.state == "failed" and got.refusal is not None, got
    assert got.refusal.code == "ZONE_RESOURCE_POOL_EXHAUSTED" and got.refusal.retryable and not got.refusal.blocked
