"""The GCP provider over HTTP, on SQLite and PostgreSQL, against the discovery-validated Compute Engine fake: dual
approval then one reservation at GCP, the lifecycle following GCP's states, a lost answer retried into one
reservation, no capacity left to the reconciler, and a future start bought as a future reservation."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.gcp.reservations import resource_name
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"  # the test store's region, zone "-a"
DAY = 86_400
BIG = {"sku": "h100_80gb", "units": 16, "start": "2026-02-01T00:00:00Z", "term_months": 12, "regions": ["us-east-1"]}


def _create(server: LiveServer, **change: Any) -> str:
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/reservations", json={**BIG, **change})
    assert r.status_code == 201, r.text
    return str(r.json()["reservation_id"])


def test_a_reservation_follows_gcp_from_two_approvals_to_its_end(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    server = gcp_server()
    rid = _create(server)
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "pending_approval"
    assert fake_gcp.calls["reservations.insert"] == 0  # nothing bought on one approval
    server.services.clock.advance(31 * DAY)  # type: ignore[attr-defined]  # the start has come: a reservation now
    second = approve(server, rid, "ml_platform_admin", "bob")  # (a day later it could no longer be approved: 409)
    assert second.status_code == 200 and second.json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    assert second.json()["provider_order_id"] == f"{ZONE}/reservations/{name}"
    sent = fake_gcp.reservation(ZONE, name)
    assert sent["specificReservation"]["count"] == "2" and sent["status"] == "CREATING"
    assert reconcile(server)["activated"] == [] and status(server, rid) == "submitted_to_cloud"
    fake_gcp.set_status(ZONE, name, "READY")
    assert reconcile(server)["activated"] == [rid] and status(server, rid) == "active"
    fake_gcp.delete(ZONE, name)  # GCP deletes it at its deleteAtTime
    assert reconcile(server)["expired"] == [rid] and status(server, rid) == "expired"
    with server.client("viewer", "vic") as c:
        events = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.status_changed"}).json()
    assert [(e["detail"]["to"], e["detail"]["reason"]) for e in events][-2:] == [
        ("active", "provider state READY"),
        ("expired", "provider state NOT_FOUND"),
    ]
    assert fake_gcp.calls["reservations.insert"] == 1


def test_a_future_start_is_a_future_reservation_gcp_approves(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    server = gcp_server()
    rid = _create(server, units=8, term_months=1)
    approve(server, rid, "finops_admin", "alice")
    name = resource_name(f"gpufleet-{rid}")
    assert fake_gcp.future_reservation(ZONE, name)["timeWindow"]["startTime"] == "2026-02-01T00:00:00Z"
    fake_gcp.set_procurement_status(ZONE, name, "DECLINED")
    assert reconcile(server)["cancelled"] == [rid] and status(server, rid) == "cancelled"


def test_a_lost_answer_is_retried_into_one_reservation(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    server = gcp_server(provider_timeout_s=1.0, gcp_max_attempts=1, provider_max_attempts=3)
    rid = _create(server, units=8, term_months=1)
    fake_gcp.delay_next("futureReservations.insert", 2.0)  # placed at GCP, the answer lost
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200 and r.json()["status"] == "submitted_to_cloud"
    assert fake_gcp.calls["futureReservations.insert"] == 1 and len(fake_gcp.future_reservations) == 1
    with server.client("ml_platform_admin", "bob") as c:  # and retrying by hand buys nothing more
        assert c.post(f"/v1/reservations/{rid}/submit").json()["status"] == "submitted_to_cloud"
    assert fake_gcp.calls["futureReservations.insert"] == 1


def test_no_capacity_keeps_the_reservation_approved_for_the_reconciler(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    server = gcp_server()
    rid = _create(server, units=8, term_months=1)
    fake_gcp.refuse_capacity(ZONE)
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED" and refused[0]["detail"]["retryable"]
    fake_gcp.no_capacity.clear()  # capacity is back: the next reconciler pass buys it, once
    assert reconcile(server)["submitted"] == [rid]
    assert len(fake_gcp.future_reservations) == 1
