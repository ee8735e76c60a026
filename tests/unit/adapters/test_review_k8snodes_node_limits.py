"""Review (k8snodes): NodePool limits that follow procurement (adapters/kubernetes/node_limits.py) when the selector
selects several NodePools of one GPU product and launched tier (``--node-limits-selector``: per-zone or
per-instance-family NodePools of one product are common)."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.node_limits import limit_changes
from tests.unit.adapters.test_node_limits import CAP, H100, _np


def test_two_nodepools_of_one_product_and_tier_do_not_each_get_the_whole_quota() -> None:
    """Review (fixed), the defect: limit_changes sets every selected NodePool of a (SKU, on-demand) to the pool's whole
    quota (96 GPUs), so with two of them (one per zone, say) Karpenter may launch 192 on-demand GPUs against a quota
    of 96: the store's bound, the point of following procurement, is doubled by gpufleet's own writes. The limits
    gpufleet writes for one (SKU, launched tier) must not add up to more than the quota; here they are left alone
    and reported, since how to split a quota between NodePools is the operator's call."""
    pools = [_np(H100, "on-demand", None, "h100-od-zone-a"), _np(H100, "on-demand", None, "h100-od-zone-b")]
    changes, skipped = limit_changes(pools, CAP)
    written = sum(c.desired for c in changes)
    assert written <= 96, f"limits written add up to {written} GPUs against a quota of 96: {changes}"
    assert skipped == [("h100-od-zone-a", "quota_shared"), ("h100-od-zone-b", "quota_shared")]
    # one NodePool of the tier, and reserved ones (bounded by the reservations themselves), are written as before
    one, _ = limit_changes([pools[0], _np(H100, "reserved", 0, "r-a"), _np(H100, "reserved", 0, "r-b")], CAP)
    assert [(c.node_pool, c.desired) for c in one] == [("h100-od-zone-a", 96), ("r-a", 48), ("r-b", 48)]
