"""Review (fixed): EC2 server errors (HTTP 500 ``InternalError`` / 503 ``Unavailable``) that outlive botocore's retries
are mapped by ``adapters/aws/errors.call`` onto a *non-retryable refusal* ("the provider answered no, nothing was
bought"). A 5xx is an unknown outcome (the GCP and Azure clients map it to ``ProviderTimeout``), so the service cancels
reservations, and fails Capacity Block purchases, that AWS has in fact created and bills."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters.aws.instances import AwsNodeTier
from gpufleet.domain.pools import Tier
from gpufleet.ports import PlacementRequest
from gpufleet.service.node_tier import launch_with_fallback
from tests.integration.aws import wire
from tests.integration.aws.conftest import Start, clients_for
from tests.integration.aws.fake_aws import FakeAws, _AwsError, _region
from tests.integration.aws.test_capacity_block_approvals import _approve, _get, _offer, _pending
from tests.integration.aws.test_moto_world import _image, _pool
from tests.integration.reservation_flow import approve, reconcile, status

pytestmark = pytest.mark.aws


def _region_of(headers: dict[str, str]) -> str:
    return _region(next((v for k, v in headers.items() if k.lower() == "authorization"), ""))


ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


def _internal_error_after(fake: FakeAws, action: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """EC2 performs ``action`` and then answers 500 InternalError (every attempt: a degraded endpoint)."""
    attr = "_" + "".join("_" + c.lower() if c.isupper() else c for c in action).lstrip("_")
    original = getattr(fake, attr)

    def degraded(region: str, p: dict[str, Any]) -> dict[str, Any]:
        original(region, p)
        raise _AwsError("InternalError", "An internal error has occurred", 500)

    monkeypatch.setattr(fake, attr, degraded)


def test_review_a_500_after_the_reservation_was_created_does_not_cancel_it(
    aws_server: Start, fake: FakeAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: CreateCapacityReservation answered 500 InternalError (the reservation exists at EC2)
    is recorded as a non-retryable refusal: the approved reservation is cancelled in the store while AWS holds (and
    bills) the capacity reservation; no reconciler pass ever looks at it again. Expected: unknown outcome, the
    reservation stays approved and the next pass finds the order by its key."""
    server = aws_server(aws_max_attempts=1)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    _internal_error_after(fake, "CreateCapacityReservation", monkeypatch)
    approve(server, rid, "finops_admin", "alice")
    assert len(fake.reservations) == 1  # AWS created it
    monkeypatch.undo()  # the endpoint is healthy again
    assert status(server, rid) != "cancelled", "a 5xx (unknown outcome) cancelled a reservation AWS created"
    reconcile(server)
    assert status(server, rid) == "submitted_to_cloud"


def test_review_a_500_after_the_block_was_bought_does_not_fail_the_purchase(
    aws_server: Start, fake: FakeAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: PurchaseCapacityBlock answered 500 InternalError after the block was bought is a
    non-retryable refusal: the dual-approved request ends ``failed`` (terminal, never reconciled) while AWS sold the
    block (its upfront fee charged). Expected: the request stays approved and the reconciler finds the block by its key.
    """
    server = aws_server(approval_threshold_usd="10000", aws_max_attempts=1)
    pid = _pending(server, _offer(server))
    assert _approve(server, pid, "finops_admin", "alice").status_code == 200
    _internal_error_after(fake, "PurchaseCapacityBlock", monkeypatch)
    _approve(server, pid, "ml_platform_admin", "bob")
    assert len(fake.reservations) == 1  # AWS sold the block
    monkeypatch.undo()
    assert _get(server, pid)["status"] != "failed", "a 5xx (unknown outcome) failed a block AWS sold"
    server.services.reconciler.run_once()
    after = _get(server, pid)
    assert after["status"] == "purchased" and after["capacity_reservation_id"] == next(iter(fake.reservations))


def test_review_a_launch_answered_500_is_not_launched_again_in_the_next_pool(
    fake: FakeAws, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: node_tier's contract is "a launch with an unknown outcome stops the walk: trying the
    next pool could launch twice". RunInstances that EC2 performed but answered 500 InternalError comes back as
    ``refused`` (a non-capacity refusal), so ``launch_with_fallback`` walks on and launches the same nodes again in the
    next pool: two sets of GPU instances for one request. Expected: the 5xx is ``unknown`` and the walk stops."""
    region_of = _region_of
    original = fake.handle

    def degraded(path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        status_code, out_headers, out = original(path, headers, body)
        if b"Action=RunInstances" in body and region_of(headers) == "us-east-1":
            return 500, {"Content-Type": "text/xml"}, wire.ec2_error("InternalError", "internal error", "req-x")
        return status_code, out_headers, out

    monkeypatch.setattr(fake, "handle", degraded)
    clients = clients_for(fake.url, regions=("us-east-1", "us-west-2"), max_attempts=1)
    tier = AwsNodeTier(clients, tier="serve-h100", image_id=_image(moto_url))
    pools = [_pool("us-east-1", Tier.ON_DEMAND), _pool("us-west-2", Tier.ON_DEMAND)]
    req = PlacementRequest("wl-review-500", "h100_80gb", 8, serving=True, checkpointable=False)
    got = launch_with_fallback(tier, req, pools)
    monkeypatch.undo()
    launched_east = tier.running("us-east-1")
    launched_west = tier.running("us-west-2")
    tier.terminate("us-east-1", launched_east)
    tier.terminate("us-west-2", launched_west)
    assert launched_east, "EC2 launched in us-east-1 before answering 500"
    assert got.attempts == [("aws/us-east-1/h100_80gb/on_demand", "unknown")], (
        f"launched again after a 5xx: {got.attempts}; running east={launched_east} west={launched_west}"
    )
