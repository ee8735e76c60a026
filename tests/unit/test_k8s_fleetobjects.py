"""Procurement's pools -> Karpenter tiers (no API server: pure compilation)."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.adapters.kubernetes.fleetobjects import karpenter_objects, tiers_from_pools
from gpufleet.domain.pools import CapacityPool, Tier


def _pool(pid: str, tier: Tier, quota: int | None = None, sku: str = "h100_80gb") -> CapacityPool:
    return CapacityPool(pid, "aws", "us-east-1", sku, tier, Decimal("2.0"), quota_gpus=quota)


def test_tiers_follow_procurement_and_chain_order() -> None:
    pools = [_pool("spot", Tier.SPOT, 256), _pool("od", Tier.ON_DEMAND, None), _pool("res", Tier.RESERVED),
             _pool("neo", Tier.SECONDARY, 64), _pool("l4", Tier.SPOT, 8, sku="l4")]  # fmt: skip
    tiers, skipped = tiers_from_pools(pools, {"h100_80gb": 96}, {"h100_80gb": "NVIDIA-H100-80GB-HBM3"})
    assert [(t.tier, t.gpus) for t in tiers] == [("reserved", 96), ("on-demand", None), ("spot", 256)]
    assert skipped == [("neo", "not_karpenter_launchable"), ("l4", "no_product")]
    pools_out = karpenter_objects(tiers)
    assert [p["spec"]["weight"] for p in pools_out] == [100, 50, 10]
    assert pools_out[0]["spec"]["limits"] == {"nvidia.com/gpu": "96"} and "limits" not in pools_out[1]["spec"]
    assert pools_out[2]["spec"]["template"]["spec"]["taints"][0]["key"] == "gpufleet.io/spot"
