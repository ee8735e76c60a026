"""Review (cloud2): an Azure capacity reservation resized at Azure (more VMs than approved): followed as Azure holds
it, and the difference must reach the operator."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}


def test_review_a_reservation_resized_at_azure_is_reported(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: the capacity reservation of 1 VM approved is resized at Azure to 3 (a PUT of
    ``sku.capacity`` by anyone with write rights on the resource group): the fleet is billed for 3 VMs, and the
    reconciler's answer says nothing (``describe`` checks only the end tag). Expected: followed (active), with a
    warning naming the VMs held against those approved."""
    server = azure_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    assert reconcile(server)["warnings"] == []  # as approved: nothing to say
    fake_azure._find(name, name, None)["sku"]["capacity"] = 3
    fake_azure.set_reservation_state(name, name, "Live")
    out = reconcile(server)
    assert out["activated"] == [rid] and status(server, rid) == "active"
    assert any(rid in w and "3 VMs" in w for w in out["warnings"]), out
