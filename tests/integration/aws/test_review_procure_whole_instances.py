"""Review: the approval threshold is decided on the GPUs proposed, while AWS (and GCP) reserve whole 8-GPU machines,
so the order placed is up to eight times what the approvers were asked about."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.reservations import term_seconds
from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.reservation_flow import approve

pytestmark = pytest.mark.aws
ONE_GPU = {"sku": "h100_80gb", "units": 1, "start": "2026-02-01T00:00:00Z", "term_months": 12, "regions": ["us-east-1"]}


def test_review_one_gpu_proposed_buys_a_whole_instance_on_one_approval(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed, session 43: ``adapters.providers.WholeMachines``), the defect: 1 H100 for 12 months was valued
    at 38,210 $ (under the 100 k$ threshold) and approved by one person; AWS is asked for one p5.48xlarge, 8 GPUs for
    12 months, 305,682 $ at the same price. Now it is valued at the 8 GPUs bought: two approvers."""
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        created = c.post("/v1/reservations", json=ONE_GPU)
    assert created.status_code == 201, created.text
    rid = created.json()["reservation_id"]
    r = approve(server, rid, "ml_platform_admin", "bob")
    assert r.status_code == 200, r.text
    assert r.json()["approvals_required"] == 2 and r.json()["status"] == "pending_approval", r.text
    assert not fake.reservations  # nothing bought on one approval
    r = approve(server, rid, "finops_admin", "frank")
    assert r.status_code == 200 and r.json()["status"] == "submitted_to_cloud", r.text
    bought_gpus = 8 * sum(int(o["TotalInstanceCount"]) for o in fake.reservations.values())
    price = PRICES_BY_SKU["h100_80gb"].reserved_1y
    assert bought_gpus == 8 and Decimal(bought_gpus) * price * term_seconds(12) / 3600 > Decimal(100_000)
