"""Review (cloud4): a GCP future reservation is an approved window of capacity. Anyone with the amendment permission
can move its window later (``futureReservations.update``: a new ``timeWindow``); GCP then delivers, if ever, outside
the term two people approved. The record decides: a window that differs from the record's is audited as a mismatch
at once, and one still pending at the recorded term's end (it never delivered within it) is cancelled by gpufleet and
the reservation cancelled, its reason saying so."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
FUTURE = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
FUTURE_START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
FUTURE_END_S = FUTURE_START_S + term_seconds(1)


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


def _future(gcp_server: Start) -> tuple[LiveServer, str, str]:
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=FUTURE).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    return server, rid, resource_name(f"gpufleet-{rid}")


def _move_window(fake: FakeGcp, name: str, start: str, end: str | None = None) -> None:
    with fake.lock:
        fr = fake.future_reservation(ZONE, name)
        fr["timeWindow"]["startTime"] = start
        if end is not None:
            fr["timeWindow"]["endTime"] = end
            fr["autoCreatedReservationsDeleteTime"] = end


def test_review_a_future_window_started_later_is_a_mismatch_at_once(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the window's start moved two weeks later, its end kept (GCP would deliver half the
    approved term), and gpufleet compared only the count and the end: nothing was reported. Expected: a warning in
    the pass's answer and one ``reservation.provider_mismatch`` naming the start."""
    server, rid, name = _future(gcp_server)
    _move_window(fake_gcp, name, "2026-02-15T00:00:00Z")
    out = reconcile(server)
    assert any("startTime" in w and "2026-02-15" in w for w in out["warnings"]), out
    said = [e["detail"]["warning"] for e in _audit(server, rid, "reservation.provider_mismatch")]
    assert len(said) == 1 and "2026-02-01" in said[0], said


def test_review_a_future_reservation_pending_past_the_term_is_cancelled(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the window moved two months later (APPROVED by GCP for the new window); at the
    recorded term's end it had delivered nothing, and gpufleet kept it ``submitted_to_cloud`` forever (only an active
    order was ended at the term), so GCP would deliver and bill it outside the approved term. Expected: before the
    end, left alone (a mismatch); at it, cancelled at GCP, the reservation cancelled with a reason saying gpufleet
    cancelled it undelivered, and one ``reservation.ended_at_term`` audit."""
    server, rid, name = _future(gcp_server)
    _move_window(fake_gcp, name, "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z")
    fake_gcp.set_procurement_status(ZONE, name, "APPROVED")
    server.services.clock.set(FUTURE_END_S - 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert status(server, rid) == "submitted_to_cloud" and out["cancelled"] == [], out
    assert len(_audit(server, rid, "reservation.provider_mismatch")) == 1
    server.services.clock.set(FUTURE_END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["cancelled"] == [rid] and status(server, rid) == "cancelled", out
    assert fake_gcp.future_reservation(ZONE, name)["status"]["procurementStatus"] == "CANCELLED"
    with server.client("viewer", "vic") as c:
        reason = str(c.get(f"/v1/reservations/{rid}").json()["status_reason"])
    assert "never delivered" in reason, reason
    ended = _audit(server, rid, "reservation.ended_at_term")
    assert len(ended) == 1 and "2026-04-01" in str(ended[0]["detail"]), ended
    reconcile(server)
    assert len(_audit(server, rid, "reservation.ended_at_term")) == 1


def test_review_a_pending_future_reservation_gcp_will_not_cancel_is_held(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: as above, one still pending past the recorded end was never cancelled. Expected:
    one GCP will not cancel (PROVISIONING) stays submitted, the refusal in the pass's warnings, and the cancel is
    tried again on the next pass."""
    server, rid, name = _future(gcp_server)
    fake_gcp.set_procurement_status(ZONE, name, "PROVISIONING")
    server.services.clock.set(FUTURE_END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert status(server, rid) == "submitted_to_cloud" and out["cancelled"] == [], out
    assert any("cancel" in w for w in out["warnings"]), out
    fake_gcp.set_procurement_status(ZONE, name, "APPROVED")
    out = reconcile(server)
    assert out["cancelled"] == [rid], out
