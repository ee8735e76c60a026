"""Review (fixed): ``CapacityBlockService.submit`` records a request ``purchased`` whenever a capacity reservation is
found under its purchase key, whatever that reservation's state. A block whose payment failed (EC2 state
``payment-failed``: nothing was bought, the capacity is not held) is booked as purchased, with a
``capacity_block.purchased`` event, and nothing ever looks at it again (Capacity Block requests have no lifecycle
after ``purchased``)."""

from __future__ import annotations

import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.aws.test_capacity_block_approvals import _approve, _get, _offer, _pending

pytestmark = pytest.mark.aws


def test_review_a_block_whose_payment_failed_is_not_booked_as_purchased(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed), the defect: the completing approval's purchase answer is lost; AWS then fails the payment
    (``payment-failed``). The reconciler's pass finds the block by its key and books the request ``purchased`` ("found
    by key"). Expected: a block found in a failed state is not a purchase (the request ends ``failed``, or stays
    approved), never ``purchased``."""
    server = aws_server(approval_threshold_usd="10000", provider_timeout_s=1.0, aws_max_attempts=1)
    pid = _pending(server, _offer(server))
    assert _approve(server, pid, "finops_admin", "alice").status_code == 200
    fake.delay_next("PurchaseCapacityBlock", 2.0)
    assert _approve(server, pid, "ml_platform_admin", "bob").status_code == 504
    cr_id = next(iter(fake.reservations))
    fake.set_state(cr_id, "payment-failed")
    server.services.reconciler.run_once()
    got = _get(server, pid)
    assert got["status"] != "purchased", f"a payment-failed block {cr_id} is booked as purchased"
