"""Review (lifecycle): gpufleet deletes an Azure capacity reservation at its term's end (Azure bills it until deleted).
The end was read from the reservation's tags, which anyone with tag rights on the resource group can edit: the term
is gpufleet's own record (the reservation's start and term in the store); a tag that disagrees is reported, not
obeyed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import LiveServer
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}
START_S = 1_769_904_000  # 2026-02-01T00:00:00Z
END_S = START_S + term_seconds(1)
DAY = 86_400


def _active(azure_server: Any, fake: FakeAzure) -> tuple[LiveServer, str, str]:
    server = azure_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    fake.set_reservation_state(name, name, "Live")
    assert reconcile(server)["activated"] == [rid]
    return server, rid, name


def _at(server: LiveServer, fake: FakeAzure, now_s: int) -> None:
    server.services.clock.set(now_s)  # type: ignore[attr-defined]
    fake.set_now(datetime.fromtimestamp(now_s, UTC))


def test_review_an_extended_end_tag_does_not_keep_the_reservation(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: someone moves ``gpufleet-end-s`` a year on (or strips the end, start and term tags): gpufleet
    never deletes the reservation, Azure bills it on past its approved term. Expected: deleted at the term's end in
    gpufleet's record, the reservation expired, the tag's disagreement reported."""
    server, rid, name = _active(azure_server, fake_azure)
    fake_azure._find(name, name, None)["tags"]["gpufleet-end-s"] = str(END_S + 365 * DAY)
    _at(server, fake_azure, END_S + DAY)
    out = reconcile(server)
    assert out["expired"] == [rid] and status(server, rid) == "expired", out
    assert fake_azure.reservations == {}


def test_review_stripped_tags_do_not_keep_the_reservation(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect (as above) with the end, start and term tags removed: the end reads as 0 (never)."""
    server, rid, name = _active(azure_server, fake_azure)
    tags = fake_azure._find(name, name, None)["tags"]
    for tag in ("gpufleet-end-s", "gpufleet-start-s", "gpufleet-term-months"):
        del tags[tag]
    _at(server, fake_azure, END_S + DAY)
    assert reconcile(server)["expired"] == [rid] and fake_azure.reservations == {}


def test_review_an_earlier_end_tag_does_not_delete_it(azure_server: Any, fake_azure: FakeAzure) -> None:
    """Review (fixed), the defect: someone sets ``gpufleet-end-s`` to a moment already past: the next pass deletes the live
    reservation mid-term (capacity paid for and approved, gone). Expected: it stays active, the mismatch reported in
    the pass's answer."""
    server, rid, name = _active(azure_server, fake_azure)
    _at(server, fake_azure, START_S + 30 * DAY + 1)  # mid-term (30.4 days), past Azure's minimum commitment
    fake_azure._find(name, name, None)["tags"]["gpufleet-end-s"] = str(START_S + DAY)
    out = reconcile(server)
    assert status(server, rid) == "active" and len(fake_azure.reservations) == 1, out
    assert any("gpufleet-end-s" in w for w in out["warnings"]), out


@pytest.mark.parametrize("edit", ["stripped", "rewritten"])
def test_review_an_edited_key_tag_does_not_cancel_a_bought_order(
    azure_server: Any, fake_azure: FakeAzure, edit: str
) -> None:
    """Review (fixed), the defect: the PUT is performed but its answer lost (the reservation stays approved), then someone strips or
    rewrites the ``gpufleet-key`` tag: the retry's ``find`` refuses the reservation as not gpufleet's
    (``name_taken``, not retryable) and the reservation is cancelled, while the capacity reservation it bought stays
    at Azure under gpufleet's own name, billed and followed by nobody. Expected: never cancelled for it: held
    ``blocked`` with the reason (restore the tag), and recorded by the first pass after the tag is restored."""
    server = azure_server(provider_timeout_s=1.0, azure_max_attempts=1, provider_max_attempts=1)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    fake_azure.delay_next("capacityReservations.createOrUpdate", 2.0)  # placed at Azure, the answer lost
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    name = resource_name(f"gpufleet-{rid}")
    tags = fake_azure._find(name, name, None)["tags"]
    if edit == "stripped":
        del tags["gpufleet-key"]
    else:
        tags["gpufleet-key"] = "gpufleet-res_someone_else"
    reconcile(server)
    assert status(server, rid) != "cancelled" and len(fake_azure.reservations) == 1
    assert status(server, rid) == "blocked"
    with server.client("viewer", "vic") as c:
        assert "restore the tag" in c.get(f"/v1/reservations/{rid}").json()["status_reason"]
    tags["gpufleet-key"] = f"gpufleet-{rid}"  # a person restored it
    assert reconcile(server)["submitted"] == [rid] and len(fake_azure.reservations) == 1
