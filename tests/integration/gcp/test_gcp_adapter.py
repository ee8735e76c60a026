"""The GCP adapter (the provider port over Compute Engine reservations) against the discovery-validated fake: names
and request ids make submissions idempotent, a future start is a future reservation, the lifecycle follows GCP's
states, and GCP's failures become the port's outcomes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gpufleet.adapters.gcp.reservations import GcpReservations, resource_name
from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi
from gpufleet.adapters.providers import OrderRequest, ProviderRefused, ProviderTimeout
from tests.integration.gcp.fake_gcp import FakeGcp

ZONE = "us-central1-a"
NOW = 1_767_225_600  # 2026-01-01
DAY = 86_400


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _port(fake: FakeGcp, clock: Clock, **config: object) -> GcpReservations:
    op_wait_s = float(config.pop("op_wait_s", 5.0))  # type: ignore[arg-type]
    config.setdefault("read_timeout_s", 15.0)
    api = GoogleApi(
        GcpConfig(project="fleet-prod", endpoint_url=f"{fake.url}/compute/v1/", credentials="none", backoff_s=0.01,
                  **config),  # type: ignore[arg-type]
    )  # fmt: skip
    return GcpReservations(api, now_s=clock, op_wait_s=op_wait_s, poll_s=0.05)


@pytest.fixture
def port(fake_gcp: FakeGcp, clock: Clock) -> Iterator[GcpReservations]:
    yield _port(fake_gcp, clock)


def _now(units: int = 16, start: int = NOW, term: int = 1) -> OrderRequest:
    return OrderRequest("h100_80gb", "us-central1", units, term, start)


def test_a_reservation_now_is_bought_once_and_follows_gcp(fake_gcp: FakeGcp, port: GcpReservations) -> None:
    order = port.submit("gpufleet-res_a1", _now(units=17))
    name = resource_name("gpufleet-res_a1")
    assert order.order_id == f"{ZONE}/reservations/{name}"
    sent = fake_gcp.requests[-1]
    assert sent[0] == "reservations.insert"
    body = sent[2]
    assert body["specificReservation"] == {"count": "3", "instanceProperties": {"machineType": "a3-highgpu-8g"}}
    assert body["deleteAtTime"] == "2026-01-31T10:00:00Z"  # start + one 730-hour month (the port's term)
    assert body["specificReservationRequired"] is False
    # a retry of the same key finds it by name: nothing more is bought
    assert port.submit("gpufleet-res_a1", _now(units=17)) == order
    assert fake_gcp.calls["reservations.insert"] == 1
    assert port.find("gpufleet-res_a1") == order and port.find("gpufleet-res_zz") is None
    assert port.describe([order.order_id])[order.order_id].state == "pending"  # CREATING
    fake_gcp.set_status(ZONE, name, "READY")
    assert port.describe([order.order_id])[order.order_id].state == "active"
    fake_gcp.delete(ZONE, name)  # GCP deletes it at deleteAtTime
    gone = port.describe([order.order_id])[order.order_id]
    assert (gone.state, gone.provider_state) == ("cancelled", "NOT_FOUND")
    assert port.describe(["cr-123", "a/b/c"]) == {}  # not this provider's orders: unknown


def test_a_future_start_is_a_future_reservation(fake_gcp: FakeGcp, port: GcpReservations, clock: Clock) -> None:
    order = port.submit("gpufleet-res_f1", _now(units=8, start=NOW + 14 * DAY, term=2))
    name = resource_name("gpufleet-res_f1")
    assert order.order_id == f"{ZONE}/futureReservations/{name}"
    body = fake_gcp.requests[-1][2]
    assert body["timeWindow"] == {"startTime": "2026-01-15T00:00:00Z", "endTime": "2026-03-16T20:00:00Z"}
    assert body["specificSkuProperties"]["totalCount"] == "1" and body["planningStatus"] == "SUBMITTED"
    assert body["autoCreatedReservationsDeleteTime"] == "2026-03-16T20:00:00Z"
    assert port.find("gpufleet-res_f1") == order  # found among the future reservations
    states = []
    for word in ("PENDING_APPROVAL", "APPROVED", "PROVISIONING", "FULFILLED"):
        fake_gcp.set_procurement_status(ZONE, name, word)
        states.append(port.describe([order.order_id])[order.order_id].state)
    assert states == ["pending", "pending", "pending", "active"]
    clock.now = NOW + 75 * DAY  # past its window: its reservations are gone
    assert port.describe([order.order_id])[order.order_id].state == "expired"
    declined = port.submit("gpufleet-res_f2", _now(units=8, start=NOW + 100 * DAY))
    fake_gcp.set_procurement_status(ZONE, resource_name("gpufleet-res_f2"), "DECLINED")
    assert port.describe([declined.order_id])[declined.order_id].state == "cancelled"


def test_no_capacity_is_a_retryable_refusal_and_a_later_try_buys(fake_gcp: FakeGcp, port: GcpReservations) -> None:
    fake_gcp.refuse_capacity(ZONE)
    with pytest.raises(ProviderRefused) as exc:
        port.submit("gpufleet-res_c1", _now())
    assert exc.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED" and exc.value.retryable
    assert fake_gcp.reservations == {}
    fake_gcp.no_capacity.clear()
    # a fresh request id: GCP would answer the refused one with its failed operation again
    assert port.submit("gpufleet-res_c1", _now()).order_id.endswith(resource_name("gpufleet-res_c1"))
    assert len(fake_gcp.reservations) == 1


def test_a_lost_answer_then_a_retry_buys_once(fake_gcp: FakeGcp, clock: Clock) -> None:
    port = _port(fake_gcp, clock, read_timeout_s=1.0, max_attempts=1)
    fake_gcp.delay_next("reservations.insert", 2.0)  # placed at GCP, the answer lost
    with pytest.raises(ProviderTimeout):
        port.submit("gpufleet-res_t1", _now())
    assert len(fake_gcp.reservations) == 1
    again = port.submit("gpufleet-res_t1", _now())  # the service's retry: found by name
    assert again.order_id.endswith(resource_name("gpufleet-res_t1"))
    assert fake_gcp.calls["reservations.insert"] == 1 and len(fake_gcp.reservations) == 1


def test_the_http_retry_reuses_its_request_id(fake_gcp: FakeGcp, clock: Clock) -> None:
    port = _port(fake_gcp, clock, read_timeout_s=1.0, max_attempts=3)
    fake_gcp.delay_next("reservations.insert", 2.0)  # the first attempt's answer lost; the second is answered
    port.create("gpufleet-res_t2", _now())  # no lookup first: only the request id keeps it to one
    assert fake_gcp.calls["reservations.insert"] == 2 and len(fake_gcp.reservations) == 1
    ids = {q["requestId"] for key, q, _ in fake_gcp.requests if key == "reservations.insert"}
    assert len(ids) == 1


def test_throttling_is_retried_then_an_unknown_outcome(fake_gcp: FakeGcp, clock: Clock) -> None:
    port = _port(fake_gcp, clock, max_attempts=3)
    fake_gcp.throttle_next("reservations.get", 2)
    assert port.find("gpufleet-res_x") is None  # two 429s, then answered
    fake_gcp.throttle_next("reservations.get", 5)
    with pytest.raises(ProviderTimeout, match="429"):
        port.find("gpufleet-res_x")


def test_an_operation_still_running_leaves_the_order_pending(fake_gcp: FakeGcp, clock: Clock) -> None:
    port = _port(fake_gcp, clock, op_wait_s=0.3)
    fake_gcp.hold_operations()
    order = port.submit("gpufleet-res_h1", _now())
    assert port.describe([order.order_id])[order.order_id].state == "pending"
    fake_gcp.finish_operations()
    assert fake_gcp.calls["zoneOperations.get"] >= 1  # it was followed while it ran


def test_a_name_gpufleet_did_not_create_is_refused_not_taken(fake_gcp: FakeGcp, port: GcpReservations) -> None:
    name = resource_name("gpufleet-res_n1")
    body = {"name": name, "description": "made by hand",
            "specificReservation": {"count": "1", "instanceProperties": {"machineType": "a3-highgpu-8g"}}}  # fmt: skip
    url = f"{fake_gcp.url}/compute/v1/projects/fleet-prod/zones/{ZONE}/reservations"
    r = httpx.post(url, params={"requestId": "0b6e1c1e-5d1a-4c4e-9f0e-3b8d2a7c6f11"}, json=body,
                   headers={"Authorization": "Bearer t"})  # fmt: skip
    assert r.status_code == 200, r.text
    with pytest.raises(ProviderRefused) as exc:
        port.submit("gpufleet-res_n1", _now())
    assert exc.value.code == "name_taken" and exc.value.blocked  # held for a person: it may be the order, edited
    assert fake_gcp.calls["reservations.insert"] == 1  # only the hand-made one


def test_resize_and_cancel(fake_gcp: FakeGcp, port: GcpReservations) -> None:
    order = port.submit("gpufleet-res_r1", _now(units=16))
    name = resource_name("gpufleet-res_r1")
    port.resize(order.order_id, 3)
    port.resize(order.order_id, 2)
    port.resize(order.order_id, 3)  # a fresh request id each time: not a replay of the first
    assert fake_gcp.reservation(ZONE, name)["specificReservation"]["count"] == "3"
    port.cancel(order.order_id)
    assert port.describe([order.order_id])[order.order_id].provider_state == "NOT_FOUND"
    future = port.submit("gpufleet-res_r2", _now(start=NOW + 30 * DAY))
    with pytest.raises(ProviderRefused, match="resized"):
        port.resize(future.order_id, 2)
    port.cancel(future.order_id)
    assert port.describe([future.order_id])[future.order_id].state == "cancelled"


def test_an_sku_gcp_does_not_sell_is_refused_before_any_call(fake_gcp: FakeGcp, port: GcpReservations) -> None:
    from gpufleet.domain.errors import ValidationError

    with pytest.raises(ValidationError, match="l40s"):
        port.create("gpufleet-res_l1", OrderRequest("l40s", "us-central1", 8, 1, NOW))
    assert fake_gcp.calls["reservations.insert"] == 0


def test_an_order_without_an_answer_leaves_the_others_described(fake_gcp: FakeGcp, clock: Clock) -> None:
    """One order's read gets no answer: absent from this pass (unknown), the other order still described."""
    port = _port(fake_gcp, clock, max_attempts=1)
    first = port.submit("gpufleet-res_d1", _now(units=8))
    second = port.submit("gpufleet-res_d2", _now(units=8))
    fake_gcp.throttle_next("reservations.get")
    seen = port.describe([first.order_id, second.order_id])
    assert list(seen) == [second.order_id]
