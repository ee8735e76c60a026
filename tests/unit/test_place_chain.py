"""The Placer port adapter: same contract as the baseline chain (never an error, serving never on spot)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.place.chain import DegradingChain
from gpufleet.ports import PlacementRequest, PoolState

POOLS = default_pools("h100_80gb")


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 64), st.one_of(st.none(), st.integers(0, 64)), st.booleans()), min_size=4, max_size=4
    ),
    st.booleans(),
    st.booleans(),
    st.integers(1, 32),
)
def test_any_pool_state_gives_an_allocation_and_serving_never_rides_spot(
    states: list[tuple[int, int | None, bool]], serving: bool, ckpt: bool, gpus: int
) -> None:
    pools = [PoolState(p, use, cap, stock) for p, (use, cap, stock) in zip(POOLS, states, strict=True)]
    a = DegradingChain().choose(PlacementRequest("w", "h100_80gb", gpus, serving, ckpt), pools)
    if a.pool_id is None:
        assert a.fallback[-1].pool_id is None
    else:
        assert a.tier is not Tier.RESERVED  # reserved is bought by procurement, not launched per pod
        assert not (serving and a.tier is Tier.SPOT)
        st_ = next(p for p in pools if p.pool.id == a.pool_id)
        assert st_.in_stock and (st_.capacity_gpus is None or st_.capacity_gpus - st_.gpus_in_use >= gpus)


def test_exhausted_on_demand_falls_to_secondary_for_serving_with_reasons() -> None:
    pools = [PoolState(p, 0, None, True) for p in POOLS]
    pools[1] = PoolState(POOLS[1], 100, 100, True)  # on-demand quota used up
    a = DegradingChain().choose(PlacementRequest("svc", "h100_80gb", 8, True, False), pools)
    assert a.tier is Tier.SECONDARY
    assert [s.trigger for s in a.fallback] == ["reserved_not_launchable", "quota_headroom", "serving_never_spot"]
