"""Review (fixed): one approved reservation of a SKU the AWS adapter maps to no instance type wedges the reconciler.  A
SKU registered over the API (``POST /v1/skus``) with a reserved AWS pool (``POST /v1/pools``) takes reservations, but
``adapters/aws/skus.instance_type`` raises ``ValidationError`` for it (not a port outcome).
``ProviderOrders._call_provider`` catches only ``ProviderTimeout`` and ``ProviderRefused``, so the error escapes
``submit``, aborts ``ProviderOrders.reconcile`` before ``_follow_provider`` and aborts ``Reconciler.run_once`` before
any other stage: no other reservation is ever activated or expired, no forecast or proposal is made, and no
``reconciler.pass`` is recorded, on every pass, forever. (The GCP port refuses such a SKU before any call, which cancels
the reservation with the reason.)"""

from __future__ import annotations

import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.reservation_flow import approve, status

pytestmark = pytest.mark.aws
ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
SKU = {"id": "mi300x", "name": "AMD MI300X", "memory_gb": 192, "gpus_per_node": 8, "cpu_per_node": 192,
       "mem_gb_per_node": 2048, "interconnect": "infinity-fabric", "relative_throughput": 1.2}  # fmt: skip
POOL = {"id": "aws/us-east-1/mi300x/reserved", "provider_id": "aws", "region_id": "us-east-1", "sku_id": "mi300x",
        "tier": "reserved", "price_usd_per_gpu_h": "3.10", "term_months": 12}  # fmt: skip


def test_review_a_reservation_aws_cannot_map_does_not_stop_the_others_from_following_aws(
    aws_server: Start, fake: FakeAws
) -> None:
    """Review (fixed), the defect: after an mi300x reservation is approved, every reconcile answers an error and the
    h100 reservation AWS reports active stays ``submitted_to_cloud``; the reconciler's pass raises. Expected: the
    unmappable reservation is refused (cancelled with the reason, or left approved and reported) and the others follow
    AWS."""
    server = aws_server()
    with server.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/skus", json=SKU).status_code == 201
        assert c.post("/v1/pools", json=POOL).status_code == 201
    with server.client("finops_admin", "fiona") as c:
        h100 = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
        odd = c.post("/v1/reservations", json={**ORDER, "sku": "mi300x"})
    assert odd.status_code == 201, odd.text
    cr_id = approve(server, h100, "finops_admin", "alice").json()["provider_order_id"]
    approve(server, odd.json()["reservation_id"], "finops_admin", "alice")
    fake.set_state(cr_id, "active")

    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 200, f"the reconcile of every reservation fails: {r.status_code} {r.text}"
    assert status(server, h100) == "active"
    server.services.reconciler.run_once()  # the background pass runs too
