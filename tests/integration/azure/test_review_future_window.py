"""Review (fixed): Azure takes a future capacity reservation's start at most *six months* ahead (azure-mgmt-compute's
ScheduleProfile.start docstring, modelled by the fake); the adapter used 182 days, which is more than six months from
a third of the calendar's dates (2026-01-01 among them), so an order submitted when its window opened was refused
(InvalidParameter, not retryable) and the reservation cancelled. The window is now six calendar months, plus a day."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpufleet.adapters.azure.reservations import AzureCapacityReservations
from gpufleet.adapters.azure.session import ArmApi, AzureConfig
from gpufleet.adapters.providers import OrderRequest
from gpufleet.service.clock import FixedClock
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.azure.test_azure_http import _advance, _create
from tests.integration.reservation_flow import approve, reconcile, status

NOW = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY = 86_400


def test_review_whenever_the_window_says_submit_azure_takes_the_start(fake_azure: FakeAzure) -> None:
    """For starts 150-200 days out, on days around each edge of the calendar: when ``earliest_submit_s`` says the
    order may be submitted, Azure takes its start (six calendar months, not 182 days); never a start too far."""
    cfg = AzureConfig(subscription_id="00000000-0000-0000-0000-0000000000aa", resource_group="gpu-fleet",
                      regions=("eastus",), endpoint_url=fake_azure.url, credentials="none")  # fmt: skip
    taken = 0
    for now in (NOW, NOW + 58 * DAY, NOW + 150 * DAY, NOW + 242 * DAY):  # Jan 1, Feb 28, May 31, Aug 31
        fake_azure.set_now(datetime.fromtimestamp(now, UTC))
        clock = FixedClock(now)
        port = AzureCapacityReservations(ArmApi(cfg, sleep=lambda _s: None), now_s=clock.now_s)
        for ahead in range(150, 200, 3):
            order = OrderRequest("h100_80gb", "eastus", 8, 1, now + ahead * DAY)
            if port.earliest_submit_s(order) <= now:
                port.submit(f"gpufleet-res_w{now}-{ahead}", order)  # no refusal: within Azure's six months
                taken += 1
    assert taken > 20


def test_review_the_window_opening_does_not_cancel_the_reservation(azure_server: Any, fake_azure: FakeAzure) -> None:
    server = azure_server()
    rid = _create(server, units=8, term_months=1, start="2026-07-02T12:00:00Z")  # 182.5 days out
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"  # outside the window
    _advance(server, fake_azure, 12 * 3600)  # 2026-01-01T12:00Z: 182 days before the start, past six months
    reconcile(server)
    assert status(server, rid) == "approved"  # waiting, not cancelled
    _advance(server, fake_azure, 36 * 3600)  # 2026-01-03: a day after six months before the start
    reconcile(server)
    assert status(server, rid) == "submitted_to_cloud"
