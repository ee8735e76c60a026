"""Review (cloud4): what GCP bills for a fulfilled future reservation is not the future reservation but the
reservations it auto-creates at its start (``status.autoCreatedReservations``: "Fully qualified urls of the
automatically created reservations at start_time", compute.v1 discovery document). The fake delivers one, as GCP does
(tests/integration/gcp/fake_gcp.py ``set_procurement_status``). Anyone with ``compute.reservations.update`` can resize
one or remove its ``deleteAtTime`` while the future reservation itself still reads as approved; the record decides."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import PROJECT, Start
from tests.integration.gcp.fake_gcp import LINK, FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
FUTURE = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
FUTURE_START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
FUTURE_END_S = FUTURE_START_S + term_seconds(1)


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


def _fulfilled(gcp_server: Start, fake: FakeGcp) -> tuple[LiveServer, str, str]:
    """An approved future reservation delivered at its start; the name of its auto-created reservation."""
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=FUTURE).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    fake.set_procurement_status(ZONE, name, "FULFILLED")
    links = fake.future_reservation(ZONE, name)["status"]["autoCreatedReservations"]
    assert len(links) == 1 and links[0].startswith(f"{LINK}projects/{PROJECT}/zones/{ZONE}/reservations/"), links
    auto = links[0].rsplit("/", 1)[1]
    got = fake.reservation(ZONE, auto)
    assert got["specificReservation"]["count"] == "1" and got["deleteAtTime"] == "2026-03-03T10:00:00Z", got
    server.services.clock.set(FUTURE_START_S + 3600)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["activated"] == [rid] and out["warnings"] == [], out
    return server, rid, auto


def test_review_an_auto_created_reservation_resized_is_a_mismatch(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: the auto-created reservation (what is billed) resized to 3 machines at GCP, the
    future reservation's ``totalCount`` still 1: gpufleet compared the future reservation alone and said nothing.
    Expected: a warning naming the auto-created reservation and its count, one ``reservation.provider_mismatch``."""
    server, rid, auto = _fulfilled(gcp_server, fake_gcp)
    fake_gcp.reservation(ZONE, auto)["specificReservation"]["count"] = "3"
    out = reconcile(server)
    assert any(auto in w and "3 machines" in w for w in out["warnings"]), out
    assert len(_audit(server, rid, "reservation.provider_mismatch")) == 1


def test_review_an_auto_created_reservation_without_its_end_is_deleted_at_the_recorded_end(
    gcp_server: Start, fake_gcp: FakeGcp
) -> None:
    """Review (fixed), the defect: the auto-created reservation's ``deleteAtTime`` removed at GCP (the future
    reservation's window untouched): GCP bills it until deleted, while gpufleet, reading the window's end, expired the
    order and stopped following it. Expected: a warning at once; at the recorded end the auto-created reservation
    deleted by gpufleet, the reservation expired, one ``reservation.ended_at_term`` naming it."""
    server, rid, auto = _fulfilled(gcp_server, fake_gcp)
    fake_gcp.reservation(ZONE, auto).pop("deleteAtTime")
    out = reconcile(server)
    assert any(auto in w and "deleteAtTime" in w for w in out["warnings"]), out
    server.services.clock.set(FUTURE_END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["expired"] == [rid] and status(server, rid) == "expired", out
    assert (PROJECT, ZONE, auto) not in fake_gcp.reservations
    ended = _audit(server, rid, "reservation.ended_at_term")
    assert len(ended) == 1 and auto in str(ended[0]["detail"]), ended


def test_review_an_auto_created_reservation_gcp_ends_is_left_to_gcp(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (holds): an auto-created reservation whose ``deleteAtTime`` is the recorded end, seen a minute after it
    (GCP's delete not done yet), is GCP's to delete: the order expires, nothing deleted or audited by gpufleet."""
    server, rid, auto = _fulfilled(gcp_server, fake_gcp)
    server.services.clock.set(FUTURE_END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["expired"] == [rid] and (PROJECT, ZONE, auto) in fake_gcp.reservations, out
    assert _audit(server, rid, "reservation.ended_at_term") == []
