"""Against moto server (through the fake, which forwards every call it does not fake, byte for byte): spot price
history and on-demand prices fill the catalog; a node tier launches and terminates instances; an injected
InsufficientInstanceCapacity makes the placement chain answer its next link with the reason."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import boto3
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.aws.instances import AwsNodeTier
from gpufleet.adapters.aws.session import AwsConfig
from gpufleet.adapters.aws.world import aws_world
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow, PoolRow
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.ports import PlacementRequest, PoolState
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from gpufleet.service.cloud_catalog import CloudCatalogService
from gpufleet.service.node_tier import launch_with_fallback
from tests.integration.aws.conftest import clients_for
from tests.integration.aws.fake_aws import FakeAws

pytestmark = pytest.mark.aws
NOW_S = 1_767_225_600
ADMIN = Actor("fiona", Role.FINOPS_ADMIN, None)


def test_prices_and_spot_history_fill_the_catalog(fake: FakeAws, moto_url: str, tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    migrate.upgrade(engine)
    world = aws_world(AwsConfig(regions=("us-east-1",), endpoint_url=fake.url), now_s=lambda: NOW_S)
    # what moto itself answers for the spot history (asked directly, not through the fake)
    moto = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_url)
    hist = moto.describe_spot_price_history(InstanceTypes=["p5.48xlarge"], ProductDescriptions=["Linux/UNIX"])
    raw = sorted(Decimal(h["SpotPrice"]) for h in hist["SpotPriceHistory"])
    assert raw, "moto returned no spot history for p5.48xlarge"
    with Session(engine) as s:  # a stale on-demand price, so the sync has something to correct
        stale = s.get(PoolRow, "aws/us-east-1/h100_80gb/on_demand")
        assert stale is not None and s.get(PoolRow, "aws/us-east-1/h100_80gb/spot") is None
        stale.price_uusd_per_gpu_h = price_to_uusd("7.50")
        s.commit()

    out = CloudCatalogService(engine, FixedClock(NOW_S), world.prices).sync(ADMIN, sku_id="h100_80gb")

    assert fake.calls["GetProducts"] == 1  # the Price List API: the validated fake
    assert "DescribeSpotPriceHistory" not in fake.calls  # forwarded to moto untouched
    with Session(engine) as s:
        od = s.get(PoolRow, "aws/us-east-1/h100_80gb/on_demand")
        spot = s.get(PoolRow, "aws/us-east-1/h100_80gb/spot")
        assert od is not None and spot is not None
        assert od.price_uusd_per_gpu_h == price_to_uusd(Decimal("55.04") / 8)  # p5.48xlarge list price / 8 GPUs
        n = len(raw)
        median = raw[n // 2] if n % 2 else (raw[n // 2 - 1] + raw[n // 2]) / 2
        assert spot.price_uusd_per_gpu_h == price_to_uusd(median / 8)
        assert spot.provider_id == "aws" and spot.tier == "spot" and spot.preemption_rate_per_h == 0.05
        synced = s.scalars(select(AuditEventRow.entity_id).where(AuditEventRow.action == "pool.price_synced")).all()
    assert sorted(synced) == ["aws/us-east-1/h100_80gb/on_demand", "aws/us-east-1/h100_80gb/spot"]
    assert {c["source"].split(" ")[0] for c in out["changed"]} == {
        "pricing:GetProducts",
        "ec2:DescribeSpotPriceHistory",
    }
    # a second sync with unchanged prices changes nothing
    again = CloudCatalogService(engine, FixedClock(NOW_S), world.prices).sync(ADMIN, sku_id="h100_80gb")
    assert again["changed"] == []
    engine.dispose()


def _image(moto_url: str) -> str:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_url)
    return str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def test_a_node_tier_launches_and_terminates_instances(fake: FakeAws, moto_url: str) -> None:
    tier = AwsNodeTier(clients_for(fake.url), tier="train-h100", image_id=_image(moto_url))
    out = tier.launch("us-east-1", sku_id="h100_80gb", count=2, client_token="gft-launch-1")
    assert out.status == "launched" and len(out.instance_ids) == 2
    assert tier.running("us-east-1") == sorted(out.instance_ids)
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_url)
    described = ec2.describe_instances(InstanceIds=list(out.instance_ids))["Reservations"][0]["Instances"]
    assert {i["InstanceType"] for i in described} == {"p5.48xlarge"}
    states = tier.terminate("us-east-1", list(out.instance_ids))
    assert set(states) == set(out.instance_ids) and set(states.values()) <= {"shutting-down", "terminated"}
    assert tier.running("us-east-1") == []


def _pool(region: str, tier: Tier) -> PoolState:
    pool = CapacityPool(f"aws/{region}/h100_80gb/{tier.value}", "aws", region, "h100_80gb", tier, Decimal("6.88"))
    return PoolState(pool, gpus_in_use=0, capacity_gpus=None, in_stock=True)


def test_insufficient_capacity_yields_the_next_link_with_the_reason(fake: FakeAws, moto_url: str) -> None:
    clients = clients_for(fake.url, regions=("us-east-1", "us-west-2"), max_attempts=2)
    tier = AwsNodeTier(clients, tier="serve-h100", image_id=_image(moto_url))
    fake.refuse_capacity("p5.48xlarge", region="us-east-1")
    pools = [_pool("us-east-1", Tier.ON_DEMAND), _pool("us-west-2", Tier.ON_DEMAND), _pool("us-east-1", Tier.SPOT)]
    req = PlacementRequest("wl-1", "h100_80gb", 8, serving=True, checkpointable=False)

    got = launch_with_fallback(tier, req, pools)

    assert got.attempts == [
        ("aws/us-east-1/h100_80gb/on_demand", "insufficient_capacity"),
        ("aws/us-west-2/h100_80gb/on_demand", "launched"),
    ]
    assert got.allocation.pool_id == "aws/us-west-2/h100_80gb/on_demand"
    assert got.allocation.fallback[0].pool_id == "aws/us-east-1/h100_80gb/on_demand"
    assert got.allocation.fallback[0].trigger == "insufficient_capacity"
    assert got.outcome is not None and len(got.outcome.instance_ids) == 1
    # EC2 answers ICE with a 5xx; botocore's standard mode retried it once before the adapter reported it
    assert fake.calls["RunInstances"] == 2
    # every pool refused: the chain ends in the queue, each refused link carrying the reason
    fake.refuse_capacity("p5.48xlarge")
    queued = launch_with_fallback(
        tier, PlacementRequest("wl-2", "h100_80gb", 8, serving=True, checkpointable=False), pools[:2]
    )
    assert queued.allocation.pool_id is None
    assert [s.trigger for s in queued.allocation.fallback] == [
        "insufficient_capacity",
        "insufficient_capacity",
        "queue",
    ]
    tier.terminate("us-west-2", list(got.outcome.instance_ids))
