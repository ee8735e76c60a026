"""Review (susp2): gpufleet restarted with a wrong ``azure_resource_group`` (a typo, the staging value). ARM answers every
call under a resource group that does not exist 404 ``ResourceGroupNotFound``; that is a configuration error, not
"this reservation is gone"."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}


def _proposed(server: LiveServer) -> str:
    with server.client("finops_admin", "fiona") as c:
        return str(c.post("/v1/reservations", json=ORDER).json()["reservation_id"])


def test_a_wrong_resource_group_leaves_an_active_order_active(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``ArmApi.get`` answers None (does not exist) for ResourceGroupNotFound as for ResourceNotFound, so
    ``describe`` reports every order cancelled (``NotFound``) and the reconciler ends the active ones as expired in
    gpufleet while they are still held and billed at Azure under the right resource group. Now the pass answers 502 naming ResourceGroupNotFound and the setting; no order
    changes state."""
    fake_azure.only_resource_groups("gpu-fleet")
    server = azure_server()
    rid = _proposed(server)
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    fake_azure.set_reservation_state(name, name, "Live")
    assert reconcile(server)["activated"] == [rid]
    server.stop()
    wrong = azure_server(azure_resource_group="gpu-fleet-staging")
    with wrong.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert status(wrong, rid) == "active", "gpufleet ended an order that Azure still holds and bills"
    held = fake_azure.reservation(name, name)["properties"]["instanceView"]["reservationStateInfo"]
    assert held["reservationState"] == "Live" and fake_azure.calls["capacityReservations.delete"] == 0
    assert r.status_code == 502 and "ResourceGroupNotFound" in r.text and "azure_resource_group" in r.text, r.text


def test_a_wrong_resource_group_leaves_an_approved_order_approved(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: with the resource group missing, ``submit`` finds no order (None), creates one, and ARM's
    ResourceGroupNotFound on the group's PUT is a refusal of the order itself: the approved reservation is cancelled
    for a setting, not for anything about the order. Expected: a refusal about the moment (retryable), left approved
    for the next pass once the setting is fixed (now so)."""
    fake_azure.only_resource_groups("gpu-fleet")
    server = azure_server(azure_resource_group="gpu-fleet-staging")
    rid = _proposed(server)
    got = approve(server, rid, "finops_admin", "alice")
    assert got.json()["status"] == "approved", got.text
    assert not fake_azure.groups
