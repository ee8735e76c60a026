"""Procurement's pools -> Karpenter tiers (no API server: pure compilation)."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.adapters.kubernetes.fleetobjects import CHAIN, capacity_chain, karpenter_objects, tiers_from_pools
from gpufleet.domain.catalog import LIST_PRICES
from gpufleet.domain.pools import CapacityPool, Tier

PRICE = {Tier.RESERVED: "4.36", Tier.ON_DEMAND: "6.88", Tier.SPOT: "1.25", Tier.SECONDARY: "2.95"}


def _pool(pid: str, tier: Tier, quota: int | None = None, sku: str = "h100_80gb", price: str = "") -> CapacityPool:
    return CapacityPool(pid, "aws", "us-east-1", sku, tier, Decimal(price or PRICE[tier]), quota_gpus=quota)


def test_tiers_follow_procurement_and_the_loops_chain_order() -> None:
    pools = [_pool("spot", Tier.SPOT, 256), _pool("od", Tier.ON_DEMAND, None), _pool("res", Tier.RESERVED),
             _pool("neo", Tier.SECONDARY, 64), _pool("l4", Tier.SPOT, 8, sku="l4")]  # fmt: skip
    tiers, skipped = tiers_from_pools(pools, {"h100_80gb": 96}, {"h100_80gb": "NVIDIA-H100-80GB-HBM3"})
    # checkpointed training takes the cheapest capacity first (spot $1.25 before on demand $6.88), as in the loop
    assert [(t.tier, t.gpus) for t in tiers] == [("reserved", 96), ("spot", 256), ("on-demand", None)]
    assert skipped == [("neo", "not_karpenter_launchable"), ("l4", "no_product")]
    pools_out = karpenter_objects(tiers)
    assert [p["spec"]["weight"] for p in pools_out] == [100, 50, 10]
    assert pools_out[0]["spec"]["limits"] == {"nvidia.com/gpu": "96"} and "limits" not in pools_out[2]["spec"]
    assert pools_out[1]["spec"]["template"]["spec"]["taints"][0]["key"] == "gpufleet.io/spot"  # checkpointable only


def test_a_spot_pool_dearer_than_on_demand_comes_after_it() -> None:
    pools = [_pool("spot", Tier.SPOT, 8, price="9.00"), _pool("od", Tier.ON_DEMAND), _pool("res", Tier.RESERVED)]
    tiers, _ = tiers_from_pools(pools, {}, {"h100_80gb": "NVIDIA-H100-80GB-HBM3"})
    assert [t.tier for t in tiers] == ["reserved", "on-demand", "spot"]
    assert [p["spec"]["weight"] for p in karpenter_objects(tiers)] == [100, 50, 10]


def test_the_default_chain_is_every_catalog_skus_chain() -> None:
    for lp in LIST_PRICES:
        prices = {Tier.RESERVED: lp.reserved_1y, Tier.ON_DEMAND: lp.on_demand, Tier.SPOT: lp.spot}
        assert capacity_chain(prices) == CHAIN, lp.sku_id
