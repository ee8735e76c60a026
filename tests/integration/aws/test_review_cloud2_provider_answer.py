"""Review (cloud2): what EC2 holds for an order differs from what was approved (modified: more instances, a later
or no end): followed as EC2 holds it, and the difference must reach the operator."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


@pytest.mark.parametrize("edit", ["count", "end", "unlimited"])
def test_review_a_capacity_reservation_modified_at_aws_is_reported(aws_server: Start, fake: FakeAws, edit: str) -> None:
    """Review (fixed), the defect: the capacity reservation of 1 instance approved for one month is modified at AWS (anyone
    with ``ec2:ModifyCapacityReservation``): 3 instances, an ``EndDate`` a month later, or no end at all (billed until
    cancelled); ``describe`` reads the state alone and the reconciler says nothing. Expected: followed as AWS holds
    it (active), with a warning naming what differs from gpufleet's record."""
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    with server.client("viewer", "vic") as c:
        cid = c.get(f"/v1/reservations/{rid}").json()["provider_order_id"]
    assert reconcile(server)["warnings"] == []  # as approved: nothing to say
    with fake.lock:
        cr = fake.reservations[cid]
        if edit == "count":
            cr["TotalInstanceCount"] = cr["AvailableInstanceCount"] = 3
        elif edit == "end":
            cr["EndDate"] = datetime(2026, 4, 1, tzinfo=UTC)
        else:
            cr.pop("EndDate")
            cr["EndDateType"] = "unlimited"
    fake.set_state(cid, "active")
    out = reconcile(server)
    assert out["activated"] == [rid] and status(server, rid) == "active"
    said = " ".join(out["warnings"])
    assert rid in said and {"count": "3 instances", "end": "2026-04-01", "unlimited": "no EndDate"}[edit] in said, out
