"""Review (cloud4): an Azure future capacity reservation (``scheduleProfile.start``) is evaluated (Pending, Approved,
Committed) before it goes Live. Its start can be changed by a PUT while it is modifiable, and Azure may never fulfil
it. The record decides, as on GCP and AWS: a start other than the record's is a mismatch at once, and one still
pending at the recorded term's end (it delivered nothing within it) is deleted by gpufleet, the reservation
cancelled, its reason saying so."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}
START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
END_S = START_S + term_seconds(1)
DAY = 86_400


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


def _future(azure_server: Any) -> tuple[LiveServer, str, str]:
    server = azure_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    return server, rid, resource_name(f"gpufleet-{rid}")


def _at(server: LiveServer, fake: FakeAzure, now_s: int) -> None:
    server.services.clock.set(now_s)  # type: ignore[attr-defined]
    fake.set_now(datetime.fromtimestamp(now_s, UTC))


def test_review_a_future_start_moved_later_is_a_mismatch_at_once(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: the start moved to 2026-03-15 by a PUT at Azure (Azure bills from then, half the
    approved term at most): gpufleet compared the VMs and the end tag only. Expected: a warning naming the start, one
    mismatch audit."""
    server, rid, name = _future(azure_server)
    fake_azure._find(name, name, None)["schedule"]["start"] = "2026-03-15"
    out = reconcile(server)
    assert any("2026-03-15" in w and "2026-02-01" in w for w in out["warnings"]), out
    assert len(_audit(server, rid, "reservation.provider_mismatch")) == 1


@pytest.mark.parametrize("state", ["Pending", "Approved"])
def test_review_a_future_reservation_pending_past_the_term_is_deleted(
    azure_server: Any, fake_azure: FakeAzure, state: str
) -> None:
    """Review (fixed), the defect: still Pending (or Approved) at the recorded term's end, it stayed
    ``submitted_to_cloud`` forever (only an active one was deleted at the term). Expected: left alone before the end; at
    it, deleted with its group, the reservation cancelled with a reason saying gpufleet cancelled it undelivered, one
    ``reservation.ended_at_term``."""
    server, rid, name = _future(azure_server)
    fake_azure.set_reservation_state(name, name, state)
    _at(server, fake_azure, END_S - 60)
    out = reconcile(server)
    assert status(server, rid) == "submitted_to_cloud" and len(fake_azure.reservations) == 1, out
    _at(server, fake_azure, END_S + 60)
    out = reconcile(server)
    assert out["cancelled"] == [rid] and status(server, rid) == "cancelled", out
    assert fake_azure.reservations == {}
    with server.client("viewer", "vic") as c:
        reason = str(c.get(f"/v1/reservations/{rid}").json()["status_reason"])
    assert "never delivered" in reason, reason
    ended = _audit(server, rid, "reservation.ended_at_term")
    assert len(ended) == 1 and state in str(ended[0]["detail"]), ended
