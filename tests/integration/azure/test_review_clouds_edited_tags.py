"""Review (clouds): the Azure adapter reads an order's term and size back from the capacity reservation's tags
(``gpufleet-end-s``, ``gpufleet-gpus``, ...). Tags are not gpufleet's alone: anyone with tag rights on the resource
group edits them in the portal (``az tag update``), and a policy may rewrite them."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.resource_names import resource_name
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}


def _submitted(server: LiveServer) -> tuple[str, str]:
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    return rid, resource_name(f"gpufleet-{rid}")


def test_review_an_edited_end_tag_does_not_stop_every_reconciler_pass(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: someone edits one reservation's ``gpufleet-end-s`` tag to a word; ``describe`` parses
    it with ``int()`` and the ValueError leaves the whole reconciler pass: POST /v1/reservations:reconcile answers 500
    on every pass, and no other Azure order is followed (activated, expired, deleted at its term's end) any more.
    Expected: the pass answers 200, the other order is activated, and the edited one is still followed (its end read
    from the start and term tags it was derived from)."""
    server = azure_server()
    edited, edited_name = _submitted(server)
    other, other_name = _submitted(server)
    fake_azure._find(edited_name, edited_name, None)["tags"]["gpufleet-end-s"] = "until-further-notice"
    fake_azure.set_reservation_state(edited_name, edited_name, "Live")
    fake_azure.set_reservation_state(other_name, other_name, "Live")
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert r.status_code == 200, r.text
    assert sorted(r.json()["activated"]) == sorted([edited, other])
    assert status(server, other) == "active" and status(server, edited) == "active"


def test_review_an_edited_size_tag_is_not_a_server_error(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: ``find`` (the port's lookup by key, run before every submission) parses the ``gpufleet-gpus``,
    ``gpufleet-term-months`` and ``gpufleet-start-s`` tags with ``int()``: after a lost answer, an edited tag makes
    the retry (POST .../submit) a 500 (ValueError). Expected: the order is found by its key (the size tag is only
    information), and recorded."""
    server = azure_server(provider_timeout_s=1.0, azure_max_attempts=1, provider_max_attempts=1)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    fake_azure.delay_next("capacityReservations.createOrUpdate", 2.0)  # placed at Azure, the answer lost
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    name = resource_name(f"gpufleet-{rid}")
    fake_azure._find(name, name, None)["tags"]["gpufleet-gpus"] = "eight"
    with server.client("ml_platform_admin", "bob") as c:
        r = c.post(f"/v1/reservations/{rid}/submit")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "submitted_to_cloud" and r.json()["provider_order_id"] == f"eastus/{name}"
