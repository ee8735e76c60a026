"""Review (authgap): EC2 answers a purchase with a permission error (``UnauthorizedOperation``: the IAM policy lacks
the action; ``AuthFailure``: the credentials are not valid; ``Blocked``: the account is blocked). That is a
configuration error an operator fixes in minutes, not a refusal of the order: the approved reservation (or the
dual-approved Capacity Block request) must stay approved and be bought by a later pass once the permission is there."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws, _AwsError
from tests.integration.aws.test_capacity_block_approvals import _approve, _get, _offer, _pending
from tests.integration.reservation_flow import approve, reconcile, status

pytestmark = pytest.mark.aws

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
DENIALS = [
    ("UnauthorizedOperation", "You are not authorized to perform this operation. Encoded authorization failure", 403),
    ("AuthFailure", "AWS was not able to validate the provided access credentials", 401),
    ("Blocked", "The user ID or account is blocked", 403),
]


def _deny(fake: FakeAws, action: str, code: str, message: str, http: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """EC2 answers ``action`` with the permission error (nothing done)."""
    attr = "_" + "".join("_" + c.lower() if c.isupper() else c for c in action).lstrip("_")

    def denied(region: str, p: dict[str, Any]) -> dict[str, Any]:
        raise _AwsError(code, message, http)

    monkeypatch.setattr(fake, attr, denied)


@pytest.mark.parametrize(("code", "message", "http"), DENIALS, ids=[d[0] for d in DENIALS])
def test_review_a_permission_error_leaves_the_reservation_approved(
    aws_server: Start, fake: FakeAws, monkeypatch: pytest.MonkeyPatch, code: str, message: str, http: int
) -> None:
    """Review (fixed), the defect: ``errors.call`` maps every error but capacity to a non-retryable refusal, so
    ``UnauthorizedOperation`` on CreateCapacityReservation cancels the approved reservation for good: it has to be
    proposed and approved again after the IAM policy is fixed. Expected: a retryable refusal naming the permission,
    the reservation held ``blocked`` (review(lifecycle): it was left approved; audited, reported in the reconcile
    answer's errors), bought on the next pass (now so)."""
    server = aws_server(aws_max_attempts=1)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    _deny(fake, "CreateCapacityReservation", code, message, http, monkeypatch)
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200, r.text
    assert status(server, rid) == "blocked", f"{code} did not hold the approved reservation"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == code and refused[0]["detail"]["retryable"] is True
    assert refused[0]["detail"]["blocked"] is True
    assert "ec2:CreateCapacityReservation" in refused[0]["detail"]["message"], refused[0]["detail"]
    still = reconcile(server)
    assert still["still_pending"] == [rid] and status(server, rid) == "blocked"
    assert [e["reservation_id"] for e in still["errors"]] == [rid] and code in still["errors"][0]["error"], still
    monkeypatch.undo()  # the operator fixed the policy
    assert reconcile(server)["submitted"] == [rid]
    assert status(server, rid) == "submitted_to_cloud" and len(fake.reservations) == 1


def test_review_a_permission_error_leaves_the_capacity_block_request_approved(
    aws_server: Start, fake: FakeAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: PurchaseCapacityBlock answered ``UnauthorizedOperation`` is a non-retryable
    refusal: the dual-approved request ends ``failed`` (terminal) for a missing IAM permission. Expected: it stays
    approved and the reconciler buys it once the permission is there (now so)."""
    server = aws_server(approval_threshold_usd="10000", aws_max_attempts=1)
    pid = _pending(server, _offer(server))
    assert _approve(server, pid, "finops_admin", "alice").status_code == 200
    code, message, http = DENIALS[0]
    _deny(fake, "PurchaseCapacityBlock", code, message, http, monkeypatch)
    r = _approve(server, pid, "ml_platform_admin", "bob")
    assert r.status_code == 502 and "ec2:PurchaseCapacityBlock" in r.text, r.text
    assert _get(server, pid)["status"] == "approved", "a missing IAM permission failed a dual-approved purchase"
    monkeypatch.undo()
    server.services.reconciler.run_once()
    assert _get(server, pid)["status"] == "purchased" and len(fake.reservations) == 1


def test_review_a_permission_error_on_describe_changes_no_order(
    aws_server: Start, fake: FakeAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (authgap): DescribeCapacityReservations answered ``UnauthorizedOperation`` (the policy lost the read)
    fails the pass (502 naming the code) and no order changes state; the next pass after the fix follows it."""
    server = aws_server(aws_max_attempts=1)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    code, message, http = DENIALS[0]
    _deny(fake, "DescribeCapacityReservations", code, message, http, monkeypatch)
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 502 and code in r.text, r.text
    assert status(server, rid) == "submitted_to_cloud"
    monkeypatch.undo()
    reconcile(server)
    assert status(server, rid) == "submitted_to_cloud" and len(fake.reservations) == 1
