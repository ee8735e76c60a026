"""Review (cloud2): what GCP holds for an order differs from what was approved (resized, its end moved): the
describe answer is GCP's truth, and the difference must reach the operator."""

from __future__ import annotations

import pytest

from gpufleet.adapters.resource_names import resource_name
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
FUTURE = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
NOW = {**FUTURE, "start": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize("edit", ["count", "end"])
def test_review_an_order_gcp_holds_bigger_or_longer_is_reported(
    gcp_server: Start, fake_gcp: FakeGcp, edit: str
) -> None:
    """Review (fixed), the defect: the future reservation of 1 machine approved for one month is fulfilled at GCP as 3
    machines (someone amended ``totalCount``), or with its window's end moved a month later: the fleet is billed for
    more than two people approved, and the reconciler's answer says nothing (``describe`` reads the state alone).
    Expected: followed as GCP holds it (active), with a warning naming what differs from gpufleet's record."""
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=FUTURE).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    assert reconcile(server)["warnings"] == []  # as approved: nothing to say
    fr = fake_gcp.future_reservation(ZONE, resource_name(f"gpufleet-{rid}"))
    if edit == "count":
        fr["specificSkuProperties"]["totalCount"] = "3"
    else:
        fr["timeWindow"]["endTime"] = "2026-04-01T00:00:00Z"
    fake_gcp.set_procurement_status(ZONE, resource_name(f"gpufleet-{rid}"), "FULFILLED")
    out = reconcile(server)
    assert out["activated"] == [rid] and status(server, rid) == "active"
    said = " ".join(out["warnings"])
    assert rid in said and ("3" in said if edit == "count" else "2026-04-01" in said or "1775001600" in said), out


def test_review_a_reservation_without_its_end_is_reported(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: a reservation bought from now carries ``deleteAtTime`` (GCP deletes it at the term's end);
    someone removes it (``reservations.update``), so GCP bills it until deleted, and gpufleet, which ends a GCP order
    only when GCP reports it gone, follows it as active forever without a word. Expected: a warning naming the end
    that is gone against gpufleet's record."""
    server = gcp_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=NOW).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    assert reconcile(server)["warnings"] == []  # as approved: nothing to say
    name = resource_name(f"gpufleet-{rid}")
    fake_gcp.reservation(ZONE, name).pop("deleteAtTime")
    fake_gcp.set_status(ZONE, name, "READY")
    out = reconcile(server)
    assert out["activated"] == [rid]
    assert any(rid in w and "deleteAtTime" in w for w in out["warnings"]), out
