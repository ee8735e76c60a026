"""Review of ``POST /v1/plans:propose`` (the loop's procurer -> pending reservations) over HTTP on SQLite and
PostgreSQL: the same order proposed again the same day, when its start had to be moved up to now."""

from __future__ import annotations

import pytest

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory
from tests.integration.test_api_planning import _hourly, _ingest

DAY = 86_400
RESERVED = "aws/us-east-1/h100_80gb/reserved"
BODY = {"sku": "h100_80gb", "region": "us-east-1"}


@pytest.mark.parametrize("end", ["rejected", "cancelled"])
def test_an_order_proposed_again_the_same_day_is_the_same_order(
    database: Database, make_server: ServerFactory, end: str
) -> None:
    """Review (fixed), the defect: with a reserved pool whose lead time is shorter than the time since midnight (0, the
    API's default for a new pool), the loop's order starts at today's midnight and is created starting *now*, but
    its Idempotency-Key is derived from the midnight start; once the approvers reject (or cancel) it, the next
    pass of the day proposes the same order under the same key with a later now, and ``plans:propose`` answered
    409 "already used ... with a different proposal" (the reconciler recorded it as the SKU-region's error)."""
    clock = FixedClock(NOW_S + 3600)
    s = make_server(database, clock=clock)
    _ingest(s, _hourly(NOW_S - 28 * DAY, 28, 24.0))
    with s.client("ml_platform_admin", "bob") as bob:
        assert bob.patch(f"/v1/pools/{RESERVED}", json={"lead_time_s": 0}).status_code == 200
        first = bob.post("/v1/plans:propose", json=BODY)
        assert first.status_code == 200, first.text
        made = first.json()["created"]
        assert made and made[0]["start_s"] == NOW_S + 3600  # moved up from midnight to now
        rid = made[0]["reservation_id"]
        verb = "cancel" if end == "cancelled" else "reject"
        assert bob.post(f"/v1/reservations/{rid}/{verb}", json={"reason": "not now"}).status_code == 200
        clock.advance(3600)
        again = bob.post("/v1/plans:propose", json=BODY)
        assert again.status_code == 200, again.text
        # the same order the same day is the same reservation (its key's), as with a start ahead of now
        assert [c["reservation_id"] for c in again.json()["created"]] == [rid]
        assert again.json()["created"][0]["status"] == end
        assert len(bob.get("/v1/reservations").json()) == 1
