"""The service's placement mapping onto place/degrade.py keeps the chain's rules for any pool state."""

from __future__ import annotations

import math
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.control.admission import ChainPlacementRequest, PoolHeadroom
from gpufleet.control.admission import place as decide
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.workloads import Priority, WorkloadKind

NOW_S = 1_767_225_600


def _state(pool_id: str, tier: Tier, free: float, stockout: bool, wait_s: int | None) -> PoolHeadroom:
    pool = CapacityPool(pool_id, "p", "r1", "h100_80gb", tier, Decimal("1"), preemption_rate_per_h=0.05)
    return PoolHeadroom(pool, free, 0.5, stockout=stockout, queue_wait_s=wait_s)


pools = st.lists(
    st.builds(
        _state,
        pool_id=st.text("abcdef", min_size=1, max_size=6),
        tier=st.sampled_from(list(Tier)),
        free=st.one_of(st.just(math.inf), st.integers(0, 64).map(float)),
        stockout=st.booleans(),
        wait_s=st.one_of(st.none(), st.integers(0, 86400)),
    ),
    max_size=8,
    unique_by=lambda s: s.pool.id,
)
requests = st.builds(
    ChainPlacementRequest,
    job_class=st.sampled_from(list(WorkloadKind)),
    priority=st.sampled_from(list(Priority)),
    sku_id=st.just("h100_80gb"),
    gpus=st.integers(1, 32),
    checkpointable=st.booleans(),
    replicas=st.integers(1, 4),
    deadline_s=st.one_of(st.none(), st.integers(NOW_S, NOW_S + 7 * 86400)),
)


@given(requests, pools)
def test_exhausted_pools_become_links_never_errors_and_serving_never_lands_on_spot(
    req: ChainPlacementRequest, states: list[PoolHeadroom]
) -> None:
    d = decide(req, states, now_s=NOW_S)
    assert d["reason"] and d["action"] in ("place", "degrade", "preempt", "queue")
    if d["pool"] is None:
        assert d["action"] == "queue" and d["reason"].startswith("queued")
        return
    chosen = next(s for s in states if s.pool.id == d["pool"])
    assert not chosen.stockout and chosen.free_gpus >= d["gpus"]
    if req.job_class is WorkloadKind.SERVING or not req.checkpointable:
        assert chosen.pool.tier is not Tier.SPOT
    if req.priority is Priority.LOW:
        assert chosen.pool.tier not in (Tier.ON_DEMAND, Tier.SECONDARY)
    assert d["fallback"][-1]["pool"] is None  # the chain ends in the queue
    assert all(s["trigger"] for s in d["skipped"])
