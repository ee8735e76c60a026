"""The Azure adapter against the ARM fake checked by azure-mgmt-compute's routes and models: one group and one
reservation per order, idempotent by name (a second submit, a lost answer), future capacity reservations for a start
a week or more ahead, the lifecycle from Azure's states, gpufleet's delete at the term's end, refusals."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.adapters.azure.quotas import AzureComputeQuotas
from gpufleet.adapters.azure.reservations import AzureCapacityReservations
from gpufleet.adapters.azure.session import ArmApi, AzureConfig
from gpufleet.adapters.providers import OrderRecord, OrderRequest, ProviderRefused
from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.azure.fake_azure import FakeAzure

NOW = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY = 86_400
H100 = "Standard_ND96isr_H100_v5"


class Clock:
    def __init__(self, fake: FakeAzure) -> None:
        self.s, self._fake = NOW, fake
        fake.set_now(datetime.fromtimestamp(NOW, UTC))

    def __call__(self) -> int:
        return self.s

    def advance(self, seconds: int) -> None:
        self.s += seconds
        self._fake.set_now(datetime.fromtimestamp(self.s, UTC))


def _port(
    fake: FakeAzure, clock: Clock, *, slept: list[float] | None = None, **config: Any
) -> AzureCapacityReservations:
    cfg = AzureConfig(subscription_id="00000000-0000-0000-0000-0000000000aa", resource_group="gpu-fleet",
                      regions=("eastus", "westus3"), zones={"eastus": "1"}, endpoint_url=fake.url,
                      credentials="none", **config)  # fmt: skip
    sleep = slept.append if slept is not None else (lambda _s: None)
    return AzureCapacityReservations(ArmApi(cfg, sleep=sleep), now_s=clock)


def _order(start_s: int = NOW, *, gpus: int = 16, sku: str = "h100_80gb", region: str = "eastus") -> OrderRequest:
    return OrderRequest(sku, region, gpus, 1, start_s)


def test_an_order_is_one_group_and_one_reservation_followed_to_its_end(fake_azure: FakeAzure) -> None:
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock)
    key = "gpufleet-res_a1"
    name = resource_name(key)
    order = port.submit(key, _order())
    assert order.order_id == f"eastus/{name}" and order.units == 16
    sent = fake_azure.reservation(name, name)
    assert sent["sku"] == {"name": H100, "capacity": 2} and sent["zones"] == ["1"]
    assert sent["tags"]["gpufleet-key"] == key and "scheduleProfile" not in sent["properties"]
    assert fake_azure.group(name)["zones"] == ["1"]
    assert port.submit(key, _order()) == order  # found by name: nothing put again
    assert fake_azure.calls["capacityReservations.createOrUpdate"] == 1
    assert port.describe([order.order_id])[order.order_id].state == "pending"  # Creating
    fake_azure.set_provisioning_state(name, name, "Succeeded")
    seen = port.describe([order.order_id, "us-east-1-a/reservations/x"])
    assert list(seen) == [order.order_id] and (seen[order.order_id].state, seen[order.order_id].provider_state) == (
        "active",
        "Succeeded",
    )
    clock.advance(term_seconds(1))  # the term is over (gpufleet's record): Azure would bill it on; gpufleet deletes it
    record = {order.order_id: OrderRecord(NOW + term_seconds(1))}
    assert port.describe([order.order_id])[order.order_id].state == "active"  # no record: nothing is deleted
    assert port.describe([order.order_id], record)[order.order_id].state == "expired"
    assert (
        fake_azure.calls["capacityReservations.delete"] == 1
        and fake_azure.calls["capacityReservationGroups.delete"] == 1
    )
    gone = port.describe([order.order_id])[order.order_id]
    assert (gone.state, gone.provider_state) == ("cancelled", "NotFound")  # the service ends an active one as expired


def test_a_start_a_week_or_more_ahead_is_a_future_reservation(fake_azure: FakeAzure) -> None:
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock)
    later = port.submit("gpufleet-res_f1", _order(NOW + 30 * DAY, region="westus3"))
    name = resource_name("gpufleet-res_f1")
    assert fake_azure.reservation(name, name)["properties"]["scheduleProfile"]["start"] == "2026-01-31"
    assert "zones" not in fake_azure.reservation(name, name)  # no zone configured for westus3: regional
    assert port.describe([later.order_id])[later.order_id].provider_state == "Pending"
    fake_azure.set_reservation_state(name, name, "Live")
    assert port.describe([later.order_id])[later.order_id].state == "active"
    soon = port.submit("gpufleet-res_f2", _order(NOW + 3 * DAY))  # under a week: a reservation from now
    soon_name = resource_name("gpufleet-res_f2")
    assert "scheduleProfile" not in fake_azure.reservation(soon_name, soon_name)["properties"]
    declined = port.submit("gpufleet-res_f3", _order(NOW + 60 * DAY))
    fake_azure.set_reservation_state(resource_name("gpufleet-res_f3"), resource_name("gpufleet-res_f3"), "Declined")
    seen = port.describe([declined.order_id, soon.order_id])[declined.order_id]
    assert (seen.state, seen.reason) == ("cancelled", "failed at Azure; deleted")
    assert fake_azure.calls["capacityReservationGroups.delete"] == 1  # nothing held: no litter left at Azure
    fake_azure.set_provisioning_state(soon_name, soon_name, "Failed")  # a capacity failure after the PUT was taken
    failed = port.describe([soon.order_id])[soon.order_id]
    assert (failed.state, failed.provider_state) == ("cancelled", "Failed")
    assert fake_azure.calls["capacityReservationGroups.delete"] == 2
    assert port.describe([soon.order_id])[soon.order_id].provider_state == "NotFound"


def test_a_live_future_reservation_inside_its_commitment_stays_active_until_azure_lets_it_go(
    fake_azure: FakeAzure,
) -> None:
    """Its term is over (its end tag says so) while Azure still holds it to its minimum commitment: the delete is
    refused, the order stays active with the refusal as its reason, and the next pass after the commitment ends it."""
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock)
    key = "gpufleet-res_c1"
    name = resource_name(key)
    start = NOW + 8 * DAY
    api = ArmApi(AzureConfig(subscription_id="00000000-0000-0000-0000-0000000000aa", resource_group="gpu-fleet",
                             endpoint_url=fake_azure.url, credentials="none"))  # fmt: skip
    api.call("g", "PUT", f"capacityReservationGroups/{name}", body={"location": "westus3"})
    tags = {"gpufleet-key": key, "gpufleet-sku": "h100_80gb", "gpufleet-gpus": "8", "gpufleet-term-months": "1",
            "gpufleet-start-s": str(start), "gpufleet-end-s": str(start + 2 * DAY)}  # fmt: skip
    api.call("r", "PUT", f"capacityReservationGroups/{name}/capacityReservations/{name}",
             body={"location": "westus3", "sku": {"name": H100, "capacity": 1}, "tags": tags,
                   "properties": {"scheduleProfile": {"start": "2026-01-09"}}})  # fmt: skip
    fake_azure.set_reservation_state(name, name, "Live")
    clock.advance(10 * DAY)  # past its end, inside Azure's minimum commitment (30 days from the start)
    record = {f"westus3/{name}": OrderRecord(start + 2 * DAY)}  # gpufleet's record of the term (as the end tag)
    held = port.describe([f"westus3/{name}"], record)[f"westus3/{name}"]
    assert (held.state, held.provider_state) == (
        "active",
        "Live",
    ) and "delete refused: OperationNotAllowed" in held.reason
    clock.advance(30 * DAY)
    assert port.describe([f"westus3/{name}"], record)[f"westus3/{name}"].state == "expired"
    assert fake_azure.calls["capacityReservations.delete"] == 2


def test_a_lost_answer_is_put_again_into_one_reservation(fake_azure: FakeAzure) -> None:
    clock = Clock(fake_azure)
    fake_azure.delay_next("capacityReservations.createOrUpdate", 1.5)  # performed; the answer comes too late
    port = _port(fake_azure, clock, read_timeout_s=0.5)
    order = port.submit("gpufleet-res_l1", _order())
    assert fake_azure.calls["capacityReservations.createOrUpdate"] == 2  # the retry is the same PUT: 200, no change
    name = resource_name("gpufleet-res_l1")
    assert fake_azure.reservation(name, name)["sku"]["capacity"] == 2 and order.order_id.endswith(name)


def test_refusals_no_capacity_then_bought_and_orders_azure_cannot_take(fake_azure: FakeAzure) -> None:
    clock = Clock(fake_azure)
    slept: list[float] = []
    port = _port(fake_azure, clock, slept=slept)
    fake_azure.refuse_capacity(H100)
    with pytest.raises(ProviderRefused) as none_now:
        port.submit("gpufleet-res_r1", _order())
    assert none_now.value.code == "ZonalAllocationFailed" and none_now.value.retryable
    fake_azure.allow_capacity(H100)
    assert port.submit("gpufleet-res_r1", _order()).units == 16  # the reconciler's next try buys it
    # nothing bought: an unsold SKU refused before any call; a region left out of the settings after looking the order
    # up (one placed there before would still be found)
    for order, code, calls in (
        (_order(sku="l40s"), "sku_not_offered", {}),
        (_order(region="brazilsouth"), "region_not_configured", {"capacityReservations.get": 1}),
    ):
        before = fake_azure.calls.copy()
        with pytest.raises(ProviderRefused) as refused:
            port.submit("gpufleet-res_r2", order)
        assert refused.value.code == code and not refused.value.retryable
        assert fake_azure.calls - before == calls
    fake_azure.throttle_next("capacityReservations.get")
    assert port.find("gpufleet-res_r1") is not None and slept == [1.0]  # ARM's Retry-After, not a guess


def test_a_name_gpufleet_did_not_create_is_a_refusal_not_an_order(fake_azure: FakeAzure) -> None:
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock)
    key = "gpufleet-res_n1"
    name = resource_name(key)
    api = ArmApi(AzureConfig(subscription_id="00000000-0000-0000-0000-0000000000aa", resource_group="gpu-fleet",
                             endpoint_url=fake_azure.url, credentials="none"))  # fmt: skip
    api.call("g", "PUT", f"capacityReservationGroups/{name}", body={"location": "eastus"})
    api.call("r", "PUT", f"capacityReservationGroups/{name}/capacityReservations/{name}",
             body={"location": "eastus", "sku": {"name": H100, "capacity": 1}, "tags": {"owner": "someone"}})  # fmt: skip
    with pytest.raises(ProviderRefused) as taken:
        port.submit(key, _order())
    assert taken.value.code == "name_taken"


def test_compute_quotas_are_read_from_the_locations_usages(fake_azure: FakeAzure) -> None:
    """The GPU families' vCPU quotas and the one spot bucket, matched without case or spaces, over every page; a
    family the location does not list gives no reading."""
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock)
    fake_azure.set_usage("eastus", "standardDSv5Family", 100)
    fake_azure.set_usage(
        "eastus", "StandardNDSH100v5Family", 192, current=96, localized="Standard NDSH100v5 Family vCPUs"
    )
    fake_azure.set_usage("eastus", "standard NDISRH200V5 Family", 96)  # spelled another way: still its family
    fake_azure.set_usage("eastus", "lowPriorityCores", 480)
    fake_azure.set_page_size(2)
    quotas = AzureComputeQuotas(port._api)
    got = {r.code: (r.value, r.tier) for r in quotas.read("eastus")}
    assert got == {
        "standardNDSH100v5Family": (192.0, "on_demand"),
        "standardNDISRH200V5Family": (96.0, "on_demand"),
        "lowPriorityCores": (480.0, "spot"),
    }  # no A100 family listed there: the stored quota applies
    assert fake_azure.calls["usage.list"] == 2  # two pages
    ref = quotas.quota_for("h100_80gb", "spot")
    assert ref is not None and (ref.code, ref.units_per_gpu, ref.gpus(480.0)) == ("lowPriorityCores", 12, 40)
    assert quotas.quota_for("l40s", "on_demand") is None and quotas.read("westus3") == []
    with pytest.raises(ProviderRefused):  # filing is not built for Azure: drafted only
        quotas.request_increase("eastus", "standardNDSH100v5Family", 384.0, reason="outlook")


def test_an_order_without_an_answer_leaves_the_others_described(fake_azure: FakeAzure) -> None:
    """One order's read gets no answer (throttled past its attempts): it is absent from this pass (unknown, left
    alone by the service), and the other orders are still described."""
    clock = Clock(fake_azure)
    port = _port(fake_azure, clock, max_attempts=1)
    first = port.submit("gpufleet-res_d1", _order())
    second = port.submit("gpufleet-res_d2", _order())
    fake_azure.throttle_next("capacityReservations.get")
    seen = port.describe([first.order_id, second.order_id])
    assert list(seen) == [second.order_id] and seen[second.order_id].state == "pending"
