"""Review (fixed): a Capacity Block bought at once (at or below the threshold) whose PurchaseCapacityBlock answer is
lost is never recorded. ``CapacityBlockService.purchase`` audits ``capacity_block.purchased`` only when
``bought.created`` is True; the requester's retry finds the block by its key (``created=False``) and records nothing.
The cumulative threshold (``_bought_at_once_usd``) is read from those audit events, so the lost purchase is missing from
the books and the requester's next block under the threshold is bought at once by one person, although the sum of the
two is above it (the dual approval the threshold promises is skipped)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.aws.test_capacity_block_approvals import SEARCH
from tests.integration.conftest import LiveServer

pytestmark = pytest.mark.aws
SMALL = {**SEARCH, "gpus": 8, "duration_h": 7 * 24}


def _buy(server: LiveServer, user: str, offer: dict[str, Any]) -> httpx.Response:
    with server.client("finops_admin", user) as c:
        body = {**SMALL, "offering_id": offer["offering_id"], "budget_code": "ML-2026"}
        return c.post("/v1/capacity-blocks:purchase", json=body)


def test_review_a_block_bought_at_once_with_a_lost_answer_still_counts_towards_the_threshold(
    aws_server: Start, fake: FakeAws
) -> None:
    """Review (fixed), the defect: the at-once purchase's answer is lost (504), the retry answers 201 ``created: false``
    from the key lookup, and no ``capacity_block.purchased`` event is ever written: the block is absent from the audit
    trail and from the requester's window, so a second block (sum above 10,000 USD) is bought at once instead of going
    to two approvers. Expected: the retry records the purchase (as the dual-approval path's ``_finish`` does when it
    finds a block by key) and the second block is 202 pending approval."""
    server = aws_server(approval_threshold_usd="10000", provider_timeout_s=1.0, aws_max_attempts=1)
    with server.client("viewer", "vic") as v:
        offers = v.get("/v1/capacity-blocks/offerings", params=SMALL).json()
    fees = [float(o["upfront_fee_usd"]) for o in offers[:2]]
    assert all(f < 10_000 for f in fees) and sum(fees) > 10_000, fees

    fake.delay_next("PurchaseCapacityBlock", 2.0)  # bought at AWS, the answer lost
    lost = _buy(server, "fiona", offers[0])
    assert lost.status_code == 504, lost.text
    assert len(fake.reservations) == 1
    retried = _buy(server, "fiona", offers[0])  # the requester's retry: found by its key, nothing bought again
    assert retried.status_code == 201, retried.text
    assert fake.calls["PurchaseCapacityBlock"] == 1

    with server.client("viewer", "vic") as v:
        bought = v.get("/v1/audit", params={"action": "capacity_block.purchased"}).json()
    assert len(bought) == 1, "the block AWS sold is not in the audit trail"

    second = _buy(server, "fiona", offers[1])
    assert second.status_code == 202, f"bought at once past the threshold: {second.status_code} {second.text}"
    assert fake.calls["PurchaseCapacityBlock"] == 1


def test_a_lost_at_once_purchase_nobody_retries_is_recorded_by_the_reconciler(aws_server: Start, fake: FakeAws) -> None:
    """The answer is lost and the requester never retries: the reconciler's pass finds the block by its key and
    records the purchase (fee and buyer from the event written before the call), once."""
    server = aws_server(approval_threshold_usd="10000", provider_timeout_s=1.0, aws_max_attempts=1)
    with server.client("viewer", "vic") as v:
        offer = v.get("/v1/capacity-blocks/offerings", params=SMALL).json()[0]
    fake.delay_next("PurchaseCapacityBlock", 2.0)
    assert _buy(server, "fiona", offer).status_code == 504
    first = server.services.reconciler.run_once().as_dict()["capacity_blocks"]
    assert first["recorded"] == [offer["offering_id"]]
    assert server.services.reconciler.run_once().as_dict()["capacity_blocks"]["recorded"] == []
    with server.client("viewer", "vic") as v:
        bought = v.get("/v1/audit", params={"action": "capacity_block.purchased"}).json()
    assert [(e["actor"], e["detail"]["upfront_fee_usd"]) for e in bought] == [("fiona", offer["upfront_fee_usd"])]
