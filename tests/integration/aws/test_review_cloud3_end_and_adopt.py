"""Review (cloud3): an EC2 capacity reservation whose ``EndDate`` was extended or removed at AWS is billed past the
approved term; and ``find`` adopts any reservation carrying gpufleet's key tag, whatever it holds or wherever it is."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.domain.reservations import term_seconds
from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import ACCOUNT, FakeAws
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
END_S = START_S + term_seconds(1)


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


@pytest.mark.parametrize("edit", ["later", "unlimited"])
def test_review_an_extended_capacity_reservation_is_cancelled_at_the_recorded_end(
    aws_server: Start, fake: FakeAws, edit: str
) -> None:
    """Review (fixed), the defect: the capacity reservation's ``EndDate`` is moved a month on, or removed
    (``EndDateType=unlimited``), at AWS; EC2 keeps it active and billed past the approved term while gpufleet only
    warns. Expected: left alone before the recorded end; at it, cancelled (an instance running in it keeps running, on
    demand), the reservation expired, and one audit event naming what EC2 held."""
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    with server.client("viewer", "vic") as c:
        cid = c.get(f"/v1/reservations/{rid}").json()["provider_order_id"]
    with fake.lock:
        cr = fake.reservations[cid]
        cr["AvailableInstanceCount"] = 0  # its one instance runs in it
        if edit == "later":
            cr["EndDate"] = datetime(2026, 4, 1, tzinfo=UTC)
        else:
            cr.pop("EndDate")
            cr["EndDateType"] = "unlimited"
    fake.set_state(cid, "active")
    server.services.clock.set(END_S - 60)  # type: ignore[attr-defined]
    assert reconcile(server)["activated"] == [rid] and fake.reservations[cid]["State"] == "active"
    server.services.clock.set(END_S + 60)  # type: ignore[attr-defined]
    out = reconcile(server)
    assert out["expired"] == [rid] and status(server, rid) == "expired", out
    assert fake.reservations[cid]["State"] == "cancelled"
    ended = _audit(server, rid, "reservation.ended_at_term")
    assert len(ended) == 1 and "in use" in str(ended[0]["detail"]), ended


def test_review_a_capacity_reservation_aws_ends_itself_is_left_to_aws(aws_server: Start, fake: FakeAws) -> None:
    """Review (holds): a reservation whose ``EndDate`` is the recorded end, seen active a minute after it (EC2 not yet
    through), is EC2's to end: nothing is cancelled or audited."""
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    with server.client("viewer", "vic") as c:
        cid = c.get(f"/v1/reservations/{rid}").json()["provider_order_id"]
    fake.set_state(cid, "active")
    server.services.clock.set(END_S + 60)  # type: ignore[attr-defined]
    reconcile(server)
    assert status(server, rid) == "active" and fake.reservations[cid]["State"] == "active"
    assert _audit(server, rid, "reservation.ended_at_term") == []


def _foreign(fake: FakeAws, key: str, region: str, instance_type: str, count: int) -> str:
    """A capacity reservation someone else made, tagged with gpufleet's key."""
    cid = f"cr-{0xF00D + len(fake.reservations):017x}"
    now = datetime(2025, 12, 1, tzinfo=UTC)
    with fake.lock:
        fake.reservations[cid] = {
            "CapacityReservationId": cid, "OwnerId": ACCOUNT,
            "CapacityReservationArn": f"arn:aws:ec2:{region}:{ACCOUNT}:capacity-reservation/{cid}",
            "InstanceType": instance_type, "InstancePlatform": "Linux/UNIX", "AvailabilityZone": f"{region}a",
            "Tenancy": "default", "TotalInstanceCount": count, "AvailableInstanceCount": count,
            "EbsOptimized": False, "EphemeralStorage": False, "State": "active", "StartDate": now,
            "EndDateType": "unlimited", "InstanceMatchCriteria": "open", "CreateDate": now,
            "Tags": [{"Key": "gpufleet:idempotency-key", "Value": key}], "ReservationType": "default",
            "_region": region,
        }  # fmt: skip
    return cid


@pytest.mark.parametrize("where", ["other_region", "other_type", "other_count"])
def test_review_a_foreign_reservation_with_our_key_is_not_adopted(aws_server: Start, fake: FakeAws, where: str) -> None:
    """Review (fixed), the defect: ``find`` takes the first capacity reservation tagged with the key in any configured
    region: one someone else tagged so (another region, another instance type, another count) is recorded as the
    order, followed and billed as approved while the approved capacity is never bought. Expected: a blocked
    ``name_taken`` refusal naming what differs (held for a person, never adopted, never cancelled); nothing bought."""
    server = aws_server(aws_regions=["us-west-2", "us-east-1"])
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    region, itype, count = {"other_region": ("us-west-2", "p5.48xlarge", 1),
                            "other_type": ("us-east-1", "p4de.24xlarge", 1),
                            "other_count": ("us-east-1", "p5.48xlarge", 4)}[where]  # fmt: skip
    cid = _foreign(fake, f"gpufleet-{rid}", region, itype, count)
    approve(server, rid, "finops_admin", "alice")
    assert status(server, rid) == "blocked"
    with server.client("viewer", "vic") as c:
        got = c.get(f"/v1/reservations/{rid}").json()
    assert got["provider_order_id"] != cid and "name_taken" in got["status_reason"], got
    assert len(fake.reservations) == 1 and fake.reservations[cid]["State"] == "active"
