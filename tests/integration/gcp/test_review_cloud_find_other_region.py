"""Review (cloud4): ``find(key)`` adopts a resource under gpufleet's name whose description carries the key. The
description is readable by anyone who can list reservations and writable by anyone with the update or insert
permission; a resource so named and described in another configured region's zone, or of another machine type or
count, is not the order approved (AWS's ``find`` checks region, instance type and count since cloud3)."""

from __future__ import annotations

import json

import pytest

from gpufleet.adapters.gcp.reservations import GcpReservations, resource_name
from gpufleet.adapters.providers import OrderRequest, ProviderRefused
from tests.integration.gcp.fake_gcp import LINK, FakeGcp
from tests.integration.gcp.test_gcp_adapter import NOW, Clock, _port

KEY = "gpufleet-res_spoof1"
ORDER = OrderRequest("h100_80gb", "us-central1", 16, 1, NOW)  # 2 x a3-highgpu-8g


def _planted(fake: FakeGcp, zone: str, machine_type: str, count: str) -> None:
    """Someone's reservation under gpufleet's name for KEY, its description copied from one gpufleet wrote."""
    name = resource_name(KEY)
    zone_link = f"{LINK}projects/fleet-prod/zones/{zone}"
    meta = {"key": KEY, "sku": "h100_80gb", "gpus": 16, "term_months": 1, "start_s": NOW}
    with fake.lock:
        fake.reservations[("fleet-prod", zone, name)] = {
            "kind": "compute#reservation", "id": "987654321", "name": name, "status": "READY", "zone": zone_link,
            "creationTimestamp": "2025-12-31T16:00:00.000-08:00", "selfLink": f"{zone_link}/reservations/{name}",
            "description": json.dumps({"gpufleet": meta}, sort_keys=True),
            "specificReservation": {"count": count, "inUseCount": "0",
                                    "instanceProperties": {"machineType": machine_type}},
        }  # fmt: skip


@pytest.fixture
def two_regions(fake_gcp: FakeGcp) -> GcpReservations:
    return _port(fake_gcp, Clock(), regions=("europe-west4", "us-central1"))


@pytest.mark.parametrize(
    ("zone", "machine_type", "count"),
    [("europe-west4-a", "a3-highgpu-8g", "2"), ("us-central1-a", "a2-ultragpu-8g", "2"),
     ("us-central1-a", "a3-highgpu-8g", "5")],
)  # fmt: skip
def test_review_a_resource_under_the_name_that_is_not_the_order_is_not_adopted(
    fake_gcp: FakeGcp, two_regions: GcpReservations, zone: str, machine_type: str, count: str
) -> None:
    """Review (fixed), the defect: a reservation under gpufleet's name carrying the key, in another configured region
    (searched first), of another machine type, or of another count: ``submit`` recorded it as the order (no capacity
    bought where and as approved). Expected: a ``blocked`` ``name_taken`` refusal naming what differs (held for a
    person, as AWS's), nothing inserted."""
    _planted(fake_gcp, zone, machine_type, count)
    with pytest.raises(ProviderRefused) as refused:
        two_regions.submit(KEY, ORDER)
    assert refused.value.code == "name_taken" and refused.value.blocked, refused.value
    assert fake_gcp.calls["reservations.insert"] == 0 and fake_gcp.calls["futureReservations.insert"] == 0


def test_review_the_order_itself_is_still_found(fake_gcp: FakeGcp, two_regions: GcpReservations) -> None:
    """Review (holds): the order gpufleet placed is found by ``find`` with the order (a retry), nothing bought twice."""
    first = two_regions.submit(KEY, ORDER)
    assert two_regions.submit(KEY, ORDER) == first
    assert fake_gcp.calls["reservations.insert"] == 1
