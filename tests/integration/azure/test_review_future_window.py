"""Review: Azure takes a future capacity reservation's start at most *six months* ahead (azure-mgmt-compute's
ScheduleProfile.start docstring, modelled by the fake), but the adapter uses 182 days. Six months is 181 days from a
third of the calendar's dates (2026-01-01 among them), and the SubmitWindow submits an order exactly when it is
182 days out: Azure refuses the start (InvalidParameter, not retryable) and the reservation is cancelled."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpufleet.adapters.azure.reservations import AzureCapacityReservations
from gpufleet.adapters.azure.session import ArmApi, AzureConfig
from gpufleet.adapters.providers import OrderRequest
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.azure.test_azure_http import _advance, _create, azure_server  # noqa: F401 (fixture)
from tests.integration.reservation_flow import approve, reconcile, status

NOW = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY = 86_400


def test_review_a_start_182_days_ahead_is_taken_by_azure(fake_azure: FakeAzure) -> None:
    fake_azure.set_now(datetime.fromtimestamp(NOW, UTC))
    cfg = AzureConfig(subscription_id="00000000-0000-0000-0000-0000000000aa", resource_group="gpu-fleet",
                      regions=("eastus",), endpoint_url=fake_azure.url, credentials="none")  # fmt: skip
    port = AzureCapacityReservations(ArmApi(cfg, sleep=lambda _s: None), now_s=lambda: NOW)
    order = OrderRequest("h100_80gb", "eastus", 8, 1, NOW + 182 * DAY)  # 2026-07-02
    assert port.earliest_submit_s(order) <= NOW  # the service submits it now ...
    port.submit("gpufleet-res_w1", order)  # ... and Azure must take it (fails: InvalidParameter, start > 6 months)


def test_review_the_window_opening_does_not_cancel_the_reservation(azure_server: Any, fake_azure: FakeAzure) -> None:
    server = azure_server()
    rid = _create(server, units=8, term_months=1, start="2026-07-02T12:00:00Z")  # 182.5 days out
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"  # outside the window
    _advance(server, fake_azure, 12 * 3600)  # 2026-01-01T12:00Z: the window opens (182 days before the start)
    reconcile(server)
    assert status(server, rid) == "submitted_to_cloud"  # fails: "cancelled" (provider refused: InvalidParameter)
