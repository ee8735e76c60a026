"""Review (susp): the requester's approval window (service/approval_rules.py ``requirement``) at the exact second a
pending reservation starts, over HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory
from tests.integration.test_review_procure_approval import DAY, _approve, _created, _res

STARTS_IN_31_DAYS = "2026-02-01T00:00:00Z"  # NOW_S + 31 days


def test_a_pending_half_that_starts_this_second_still_adds_up(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the window counts a pending reservation of the requester created more than 30 days
    ago only while its start is ahead (``start_s > now``), but approval accepts a start equal to now; so at the
    second a pending half starts (created 31 days ago) it is in nobody's window, and the other half created now is
    valued alone: 76 k$ on one approval, and the first half can then be approved as well."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("finops_admin", "sam") as sam:
        first = _created(sam, _res(2, start=STARTS_IN_31_DAYS))
        clock.advance(31 * DAY)  # now == the first half's start: it may still be approved (start not in the past)
        second = _created(sam, _res(2))
    with s.client("ml_platform_admin", "bob") as bob:
        r = _approve(bob, second)
        assert r.status_code == 200, r.text
        assert (r.json()["status"], r.json()["approvals_required"]) == ("pending_approval", 2)
        assert bob.get(f"/v1/reservations/{first}").json()["status"] == "pending_approval"
