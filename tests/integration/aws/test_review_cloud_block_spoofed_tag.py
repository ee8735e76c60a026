"""Review (cloud4): PurchaseCapacityBlock takes no ClientToken, so gpufleet tags the block it buys with
``gpufleet:idempotency-key = gpufleet-cb-<offering id>`` and looks that tag up before buying (a lost answer never buys
twice). Anyone with ``ec2:CreateTags`` can put that tag on another capacity reservation: the offering ids are listed to
everyone in the account."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import ACCOUNT, FakeAws
from tests.integration.aws.test_capacity_block_approvals import SEARCH
from tests.integration.conftest import LiveServer

pytestmark = pytest.mark.aws
SMALL = {**SEARCH, "gpus": 8, "duration_h": 7 * 24}


def _buy(server: LiveServer, offer: dict[str, Any]) -> httpx.Response:
    with server.client("finops_admin", "fiona") as c:
        body = {**SMALL, "offering_id": offer["offering_id"], "budget_code": "ML-2026"}
        return c.post("/v1/capacity-blocks:purchase", json=body)


def _spoof(fake: FakeAws, key: str, reservation_type: str, count: int) -> str:
    """Someone's capacity reservation carrying gpufleet's purchase key."""
    cid = f"cr-{0xBAD0 + len(fake.reservations):017x}"
    now = datetime(2025, 12, 1, tzinfo=UTC)
    with fake.lock:
        fake.reservations[cid] = {
            "CapacityReservationId": cid, "OwnerId": ACCOUNT, "InstanceType": "p5.48xlarge",
            "InstancePlatform": "Linux/UNIX", "AvailabilityZone": "us-east-1a", "Tenancy": "default",
            "TotalInstanceCount": count, "AvailableInstanceCount": count, "State": "active", "StartDate": now,
            "EndDateType": "unlimited", "InstanceMatchCriteria": "open", "CreateDate": now,
            "ReservationType": reservation_type, "Tags": [{"Key": "gpufleet:idempotency-key", "Value": key}],
            "_region": "us-east-1",
        }  # fmt: skip
    return cid


@pytest.mark.parametrize("kind", ["default", "capacity-block"])
def test_review_a_reservation_tagged_with_the_purchase_key_is_not_the_block(
    aws_server: Start, fake: FakeAws, kind: str
) -> None:
    """Review (fixed), the defect: an ordinary capacity reservation (or another block, of 3 instances) tagged with the
    offering's purchase key before gpufleet buys it: the purchase found it by the tag and answered 201 ``created:
    false`` with that reservation's id, audited ``capacity_block.purchased``, while no block was bought. Expected: what
    is not the offering's block (not a Capacity Block, or not its instance type, count, start and end) is not taken for
    it: the block is bought once and recorded under its own id."""
    server = aws_server(approval_threshold_usd="100000")
    with server.client("viewer", "vic") as v:
        offer = v.get("/v1/capacity-blocks/offerings", params=SMALL).json()[0]
    spoofed = _spoof(fake, f"gpufleet-cb-{offer['offering_id']}", kind, 3)
    r = _buy(server, offer)
    assert r.status_code == 201, r.text
    got = r.json()
    assert fake.calls["PurchaseCapacityBlock"] == 1, got
    assert got["created"] is True and got["capacity_reservation_id"] != spoofed, got
    with server.client("viewer", "vic") as v:
        bought = v.get("/v1/audit", params={"action": "capacity_block.purchased"}).json()
    assert [e["entity_id"] for e in bought] == [got["capacity_reservation_id"]], bought
    again = _buy(server, offer)  # a retry: the block found under its key, nothing bought twice
    assert again.status_code == 201 and again.json()["capacity_reservation_id"] == got["capacity_reservation_id"]
    assert fake.calls["PurchaseCapacityBlock"] == 1
