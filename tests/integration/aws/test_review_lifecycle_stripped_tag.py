"""Review (lifecycle): the AWS adapter follows its orders (``describe``) through a tag-key filter on
``gpufleet:idempotency-key``; the tag is editable by anyone with ``ec2:DeleteTags`` on the account."""

from __future__ import annotations

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


def test_review_a_stripped_key_tag_does_not_lose_the_order(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed), the defect: someone deletes the ``gpufleet:idempotency-key`` tag of an active capacity reservation, then it is
    cancelled at AWS: ``describe`` no longer lists it, the reconciler leaves it "unknown", and the reservation stays
    ``active`` in gpufleet for ever (counted as committed capacity, never expired). Expected: the order is followed by
    its id (gpufleet's record), the cancellation ends it as expired, the missing tag reported."""
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    with server.client("viewer", "vic") as c:
        cid = c.get(f"/v1/reservations/{rid}").json()["provider_order_id"]
    fake.set_state(cid, "active")
    assert reconcile(server)["activated"] == [rid]
    with fake.lock:
        cr = fake.reservations[cid]
        cr["Tags"] = [t for t in cr["Tags"] if t["Key"] != "gpufleet:idempotency-key"]
    fake.set_state(cid, "cancelled")
    out = reconcile(server)
    assert out["expired"] == [rid] and status(server, rid) == "expired", out
    assert any("gpufleet:idempotency-key" in w for w in out["warnings"]), out
