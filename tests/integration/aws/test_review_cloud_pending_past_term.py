"""Review (cloud4): an EC2 future-dated capacity reservation is assessed, then scheduled, and delivered at its
``StartDate``. Its start can be pushed out at AWS (``ModifyCapacityReservation`` with ``StartDate`` and a date-change
quote), and EC2 can delay delivery (state ``delayed``). The record decides: a start other than the record's is audited
as a mismatch at once, and one still pending at the recorded term's end (it never delivered within it) is cancelled by
gpufleet where EC2 lets it be without charges (``assessing``, ``delayed``); a ``scheduled`` one is cancelled only
against a cancellation quote (charges): held for a person, said in the warnings."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.domain.reservations import term_seconds
from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
END_S = START_S + term_seconds(1)


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


def _ordered(aws_server: Start) -> tuple[LiveServer, str, str]:
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    with server.client("viewer", "vic") as c:
        cid = str(c.get(f"/v1/reservations/{rid}").json()["provider_order_id"])
    return server, rid, cid


def _push_start(fake: FakeAws, cid: str, start: datetime, end: datetime | None = None) -> None:
    with fake.lock:
        cr = fake.reservations[cid]
        cr["OriginalStartDate"] = cr["StartDate"]
        cr["StartDate"] = start
        if end is not None:
            cr["EndDate"] = end


def test_review_a_start_pushed_out_is_a_mismatch_at_once(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed), the defect: the start pushed two weeks later, the end kept (EC2 would deliver half the approved
    term), and gpufleet compared only the count and the end: nothing was reported. Expected: a warning naming the
    StartDate, one ``reservation.provider_mismatch``."""
    server, rid, cid = _ordered(aws_server)
    fake.set_state(cid, "scheduled")
    _push_start(fake, cid, datetime(2026, 2, 15, tzinfo=UTC))
    out = reconcile(server)
    assert any("StartDate" in w and "2026-02-15" in w for w in out["warnings"]), out
    said = [e["detail"]["warning"] for e in _audit(server, rid, "reservation.provider_mismatch")]
    assert len(said) == 1 and "2026-02-01" in said[0], said


@pytest.mark.parametrize("state", ["assessing", "delayed"])
def test_review_a_reservation_pending_past_the_term_is_cancelled(aws_server: Start, fake: FakeAws, state: str) -> None:
    """Review (fixed), the defect: still ``assessing`` or ``delayed`` at the recorded term's end (it delivered nothing
    within it), it stayed ``submitted_to_cloud`` forever (only an active one was ended at the term), EC2 free to deliver
    and bill it later. Expected: left alone before; at it, cancelled at AWS (no charge in these states), the reservation
    cancelled with a reason saying gpufleet cancelled it undelivered, and one ``reservation.ended_at_term``."""
    server, rid, cid = _ordered(aws_server)
    fake.set_state(cid, state)
    server.services.clock.set(END_S - 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert status(server, rid) == "submitted_to_cloud" and fake.reservations[cid]["State"] == state, out
    server.services.clock.set(END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["cancelled"] == [rid] and status(server, rid) == "cancelled", out
    assert fake.reservations[cid]["State"] == "cancelled"
    with server.client("viewer", "vic") as c:
        reason = str(c.get(f"/v1/reservations/{rid}").json()["status_reason"])
    assert "never delivered" in reason, reason
    ended = _audit(server, rid, "reservation.ended_at_term")
    assert len(ended) == 1 and state in str(ended[0]["detail"]), ended


def test_review_a_scheduled_one_pushed_past_the_term_is_held_for_a_person(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed), the defect: as above, kept forever, and said nowhere. The start pushed two months later (still
    ``scheduled``): at the recorded end EC2 cancels it only against a
    cancellation quote (charges for the commitment), which gpufleet does not accept on its own. Expected: it stays
    submitted, no charge accepted, the pass's warnings saying the term is over, it never delivered, and the cancel was
    refused; once AWS lets it go (``delayed``: commitment waived) the next pass cancels it."""
    server, rid, cid = _ordered(aws_server)
    fake.set_state(cid, "scheduled")
    _push_start(fake, cid, datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    server.services.clock.set(END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert status(server, rid) == "submitted_to_cloud" and fake.reservations[cid]["State"] == "scheduled", out
    assert any("never delivered" in w and "cancel" in w for w in out["warnings"]), out
    fake.set_state(cid, "delayed")
    out = reconcile(server)
    assert out["cancelled"] == [rid] and fake.reservations[cid]["State"] == "cancelled", out
