"""The fake cannot drift from botocore's model (a request or response outside the model is refused), and the
adapter's failure handling: throttling retried by botocore's standard mode, a lost answer looked up by its
token, a capacity refusal reported as retryable, modify and cancel followed by describe."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from gpufleet.adapters.aws.reservations import AwsCapacityReservations
from gpufleet.adapters.providers import OrderRequest, ProviderRefused, ProviderTimeout
from tests.integration.aws import wire
from tests.integration.aws.conftest import clients_for
from tests.integration.aws.fake_aws import FakeAws

pytestmark = pytest.mark.aws
NOW_S = 1_767_225_600
ORDER = OrderRequest("h100_80gb", "us-east-1", 16, 1, NOW_S + 31 * 86400)


def test_a_request_outside_the_model_is_refused_and_recorded(fake: FakeAws) -> None:
    # a parameter EC2's model does not have (form fields as the query protocol sends them)
    body = {"Action": "CreateCapacityReservation", "Version": "2016-11-15", "InstanceType": "p5.48xlarge"}
    r = httpx.post(fake.url, data={**body, "InstancePlatform": "Linux/UNIX", "InstanceCount": "1", "Colour": "red"})
    assert r.status_code == 400 and "Colour" in r.text
    # a required parameter missing (InstanceCount)
    r2 = httpx.post(fake.url, data={**body, "InstancePlatform": "Linux/UNIX"})
    assert r2.status_code == 400 and "InstanceCount" in r2.text
    # the JSON protocol: a wrong type for DesiredValue
    r3 = httpx.post(
        fake.url,
        content=b'{"ServiceCode": "ec2", "QuotaCode": "L-417A185B", "DesiredValue": "lots"}',
        headers={"X-Amz-Target": "ServiceQuotasV20190624.RequestServiceQuotaIncrease"},
    )
    assert r3.status_code == 400
    assert len(fake.violations) == 3 and fake.reservations == {} and fake.quota_requests == {}
    fake.violations.clear()  # recorded as expected; the fixture checks no other test produces any


def test_a_response_outside_the_model_is_caught_before_it_is_sent() -> None:
    op = wire.MODELS["ec2"].operation_model("DescribeCapacityReservations")
    good = {"CapacityReservations": [{"CapacityReservationId": "cr-1", "TotalInstanceCount": 2}]}
    assert b"<capacityReservationSet><item>" in wire.ec2_response(op, good, "r1")
    with pytest.raises(wire.WireViolation, match="TotalInstanceCount"):
        wire.ec2_response(op, {"CapacityReservations": [{"TotalInstanceCount": "two"}]}, "r2")
    with pytest.raises(wire.WireViolation, match="Colour"):
        wire.ec2_response(op, {"CapacityReservations": [{"Colour": "red"}]}, "r3")
    sq = wire.MODELS["service-quotas"].operation_model("GetServiceQuota")
    with pytest.raises(wire.WireViolation):
        wire.json_response(sq, {"Quota": {"Value": "many"}})


def test_throttling_is_retried_by_botocore_standard_mode(fake: FakeAws) -> None:
    cr = AwsCapacityReservations(clients_for(fake.url, max_attempts=3), now_s=lambda: NOW_S)
    fake.throttle_next("DescribeCapacityReservations", times=2)
    assert cr.find("gpufleet-none") is None
    assert fake.calls["DescribeCapacityReservations"] == 3  # two throttled answers, then the real one
    fake.throttle_next("DescribeCapacityReservations", times=3)
    with pytest.raises(ProviderTimeout, match="throttled"):
        cr.find("gpufleet-none")


def test_a_lost_answer_is_looked_up_by_its_token_before_any_retry(fake: FakeAws) -> None:
    cr = AwsCapacityReservations(clients_for(fake.url, max_attempts=1, read_timeout_s=0.5), now_s=lambda: NOW_S)
    fake.delay_next("CreateCapacityReservation", 1.5)  # placed, then the answer comes too late
    with pytest.raises(ProviderTimeout):
        cr.submit("gpufleet-res_lost", ORDER)
    assert len(fake.reservations) == 1
    again = cr.submit("gpufleet-res_lost", ORDER)
    assert fake.calls["CreateCapacityReservation"] == 1  # the retry found it: no second create
    assert list(fake.reservations) == [again.order_id] and fake.tokens == {"gpufleet-res_lost": again.order_id}
    assert (again.sku_id, again.units, again.term_months, again.start_s) == ("h100_80gb", 16, 1, ORDER.start_s)


def test_create_describe_modify_cancel(fake: FakeAws) -> None:
    cr = AwsCapacityReservations(clients_for(fake.url), now_s=lambda: NOW_S)
    order = cr.submit("gpufleet-res_a", ORDER)
    sent = fake.reservations[order.order_id]
    assert sent["InstanceType"] == "p5.48xlarge" and sent["TotalInstanceCount"] == 2  # 16 GPUs = 2 x 8
    assert sent["StartDate"] == datetime.fromtimestamp(ORDER.start_s, UTC)  # future-dated: StartDate sent
    assert sent["EndDate"] == datetime.fromtimestamp(ORDER.start_s + 730 * 3600, UTC)
    assert sent["AvailabilityZone"] == "us-east-1a" and sent["InstanceMatchCriteria"] == "open"
    assert cr.describe([order.order_id])[order.order_id].state == "pending"  # EC2 says "assessing"
    fake.set_state(order.order_id, "active")
    assert cr.modify("us-east-1", order.order_id, instance_count=3)
    assert fake.reservations[order.order_id]["TotalInstanceCount"] == 3
    assert cr.describe([order.order_id])[order.order_id].state == "active"
    assert cr.cancel("us-east-1", order.order_id)
    seen = cr.describe([order.order_id])[order.order_id]
    assert (seen.state, seen.provider_state) == ("cancelled", "cancelled")
    with pytest.raises(ProviderRefused) as refused:
        cr.cancel("us-east-1", order.order_id)
    assert refused.value.code == "IncorrectState" and not refused.value.retryable


def test_no_capacity_for_a_reservation_is_a_retryable_refusal(fake: FakeAws) -> None:
    cr = AwsCapacityReservations(clients_for(fake.url, max_attempts=1), now_s=lambda: NOW_S)
    fake.refuse_capacity("p5.48xlarge")
    with pytest.raises(ProviderRefused) as refused:
        cr.submit("gpufleet-res_b", ORDER)
    assert refused.value.code == "InsufficientInstanceCapacity" and refused.value.retryable
    assert fake.reservations == {}
