"""NodePool limits that follow procurement (adapters/kubernetes/node_limits.py): which limit for each NodePool the
selector selected (which ones it selects is the API server's: tests/integration/k8s/test_node_limits.py)."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.node_limits import LimitChange, StoreCapacity, limit_changes
from gpufleet.control.observation import ObservedNodePool

H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S"


def _np(product: str, tier: str, limit: int | None, name: str | None = None) -> ObservedNodePool:
    default = f"{product.lower()}-{tier}"
    return ObservedNodePool(name or default, limit, (product,), (tier,), gpu=True)


CAP = StoreCapacity(
    "us-east-1",
    ("h100_80gb", "l40s", "a100_80gb"),
    {("h100_80gb", "reserved"): None, ("h100_80gb", "on_demand"): 96, ("l40s", "reserved"): None,
     ("l40s", "on_demand"): None},
    {"h100_80gb": 48},
)  # fmt: skip


def test_reserved_follows_the_active_reservations_and_launched_tiers_the_quotas() -> None:
    pools = [
        _np(H100, "reserved", 0),  # bought since: 48
        _np(H100, "on-demand", None),  # the pool's quota: 96
        _np(H100, "spot", 10),  # no spot pool in the region: left alone
        _np(L40S, "reserved", 8),  # nothing active any more: 0
        _np(L40S, "on-demand", 32),  # no quota stated: left alone
        _np("Mystery-GPU", "reserved", 1),  # no SKU for its product
        ObservedNodePool("cpu", None),  # no GPU product
    ]
    changes, skipped = limit_changes(pools, CAP)
    assert changes == [
        LimitChange("nvidia-h100-80gb-hbm3-reserved", "h100_80gb", "reserved", 0, 48, "reserved_active"),
        LimitChange("nvidia-h100-80gb-hbm3-on-demand", "h100_80gb", "on-demand", None, 96, "pool_quota"),
        LimitChange("nvidia-l40s-reserved", "l40s", "reserved", 8, 0, "reserved_active"),
    ]
    assert skipped == [("nvidia-h100-80gb-hbm3-spot", "no_pool"), ("nvidia-l40s-on-demand", "no_quota_stated"),
                       ("mystery-gpu-reserved", "no_sku"), ("cpu", "not_one_product_and_tier")]  # fmt: skip
    # a limit already right is not written again; --sku maps a product the name tokens do not
    again, _ = limit_changes([_np(H100, "reserved", 48), _np("NVIDIA-H100-NVL", "reserved", 2)], CAP,
                             {"NVIDIA-H100-NVL": "h100_80gb"})  # fmt: skip
    assert again == [LimitChange("nvidia-h100-nvl-reserved", "h100_80gb", "reserved", 2, 48, "reserved_active")]
