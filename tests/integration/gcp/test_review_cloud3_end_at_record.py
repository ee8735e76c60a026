"""Review (cloud3): GCP deletes a reservation at its ``deleteAtTime`` (a future reservation's auto-created ones at the
window's end); anyone with ``reservations.update`` can remove or move that end, and GCP then bills the capacity past
the term two people approved. gpufleet's record of the term decides, as for Azure: at the recorded end gpufleet
ends what GCP still holds, and audits what it found."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.conftest import NOW_S, LiveServer
from tests.integration.gcp.conftest import PROJECT, Start
from tests.integration.gcp.fake_gcp import LINK, FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
NOW = {"sku": "h100_80gb", "units": 8, "start": "2026-01-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
FUTURE = {**NOW, "start": "2026-02-01T00:00:00Z"}
FUTURE_START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
NOW_END_S = NOW_S + term_seconds(1)
FUTURE_END_S = FUTURE_START_S + term_seconds(1)


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


def _active_reservation(gcp_server: Start, fake: FakeGcp) -> tuple[LiveServer, str, str]:
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=NOW).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    fake.set_status(ZONE, name, "READY")
    assert reconcile(server)["activated"] == [rid]
    return server, rid, name


def test_review_a_reservation_without_its_end_is_deleted_at_the_recorded_end(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: someone removes the reservation's ``deleteAtTime`` (or moves it a year on) while two
    VMs run in it; GCP bills it until deleted and gpufleet only warned, on every pass, forever. Expected: left alone
    before the recorded end; at it, deleted (the VMs in it keep running, on demand, as Azure's path deletes at the
    recorded end whatever uses it), the reservation expired, and one audit event naming what GCP held."""
    server, rid, name = _active_reservation(gcp_server, fake_gcp)
    with fake_gcp.lock:
        res = fake_gcp.reservation(ZONE, name)
        res.pop("deleteAtTime")
        res["specificReservation"]["inUseCount"] = "1"
    server.services.clock.set(NOW_END_S - 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert status(server, rid) == "active" and out["expired"] == [] and fake_gcp.reservations, out
    server.services.clock.set(NOW_END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["expired"] == [rid] and status(server, rid) == "expired", out
    assert not fake_gcp.reservations
    ended = _audit(server, rid, "reservation.ended_at_term")
    assert len(ended) == 1, ended
    said = str(ended[0]["detail"])
    assert "deleteAtTime" in said and "in use" in said, said


def test_review_a_reservation_gcp_ends_itself_is_left_to_gcp(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (holds): a reservation whose ``deleteAtTime`` is still the recorded end, seen READY a minute after it
    (GCP's delete not done yet), is GCP's to delete: gpufleet deletes nothing and audits nothing."""
    server, rid, _name = _active_reservation(gcp_server, fake_gcp)
    server.services.clock.set(NOW_END_S + 60)  # type: ignore[attr-defined]
    reconcile(server)
    assert status(server, rid) == "active" and len(fake_gcp.reservations) == 1
    assert _audit(server, rid, "reservation.ended_at_term") == []


def test_review_a_future_reservation_moved_later_is_ended_at_the_recorded_end(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: a fulfilled future reservation's window is moved a month later (and its
    auto-created reservation's ``deleteAtTime`` with it): GCP reports it FULFILLED past the approved term, billing
    the auto-created reservation, and gpufleet only warns. Expected: at the recorded end the auto-created reservation
    is deleted, the reservation expired and the end audited."""
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=FUTURE).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    auto = f"{name[:40]}-auto-1"
    zone_link = f"{LINK}projects/{PROJECT}/zones/{ZONE}"
    with fake_gcp.lock:
        fr = fake_gcp.future_reservation(ZONE, name)
        fr["timeWindow"]["endTime"] = "2026-04-01T00:00:00Z"
        fr["status"]["autoCreatedReservations"] = [f"{zone_link}/reservations/{auto}"]
        props = fr["specificSkuProperties"]["instanceProperties"]
        fake_gcp.reservations[(PROJECT, ZONE, auto)] = {
            "kind": "compute#reservation", "id": "1234567", "name": auto, "status": "READY", "zone": zone_link,
            "creationTimestamp": "2026-01-31T16:00:00.000-08:00", "selfLink": f"{zone_link}/reservations/{auto}",
            "specificReservation": {"count": "1", "inUseCount": "0", "instanceProperties": props},
            "deleteAtTime": "2026-04-01T00:00:00Z",
        }  # fmt: skip
    fake_gcp.set_procurement_status(ZONE, name, "FULFILLED")
    server.services.clock.set(FUTURE_START_S + 3600)  # type: ignore[attr-defined]
    assert reconcile(server)["activated"] == [rid]
    server.services.clock.set(FUTURE_END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["expired"] == [rid] and status(server, rid) == "expired", out
    assert (PROJECT, ZONE, auto) not in fake_gcp.reservations
    said = str(_audit(server, rid, "reservation.ended_at_term"))
    assert "2026-04-01" in said and auto in said, said


def test_review_a_mismatch_is_audited_and_logged_once_per_change(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: a reservation resized at GCP was logged as a warning on every pass (every
    ``reconcile_interval_s``, for as long as it lasted) and left nowhere but in each pass's answer. Expected: audited
    (``reservation.provider_mismatch``) and logged once when it appears, again when it changes or clears; each pass's
    answer still lists it while it lasts (a person running ``gpufleet reconcile`` sees what is wrong now)."""
    server, rid, name = _active_reservation(gcp_server, fake_gcp)
    fake_gcp.reservation(ZONE, name)["specificReservation"]["count"] = "3"
    for _ in range(3):
        assert any("3 machines" in w for w in reconcile(server)["warnings"])
    assert len(_audit(server, rid, "reservation.provider_mismatch")) == 1
    fake_gcp.reservation(ZONE, name)["specificReservation"]["count"] = "4"
    reconcile(server)
    fake_gcp.reservation(ZONE, name)["specificReservation"]["count"] = "1"
    assert reconcile(server)["warnings"] == []
    reconcile(server)
    said = [e["detail"]["warning"] for e in _audit(server, rid, "reservation.provider_mismatch")]
    assert len(said) == 3 and "4 machines" in " ".join(said) and "" in said, said
