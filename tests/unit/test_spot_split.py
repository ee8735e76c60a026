"""gpufleet's split spot launch: the whole nodes of a checkpointed launch that fit the spot room go to spot."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.control.placement import SpotFirstForCheckpointed
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.place.fallback import FallbackChain
from gpufleet.ports import PlacementRequest, PoolState
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.world import World

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only


def _states(spot_used: int, spot_cap: int = 64, spot_in_stock: bool = True) -> list[PoolState]:
    out = []
    for p in default_pools("h100_80gb"):
        if p.tier is Tier.SPOT:
            out.append(PoolState(p, spot_used, spot_cap, spot_in_stock))
        else:
            out.append(PoolState(p, 0, 64 if p.tier is not Tier.RESERVED else None, True))
    return out


def _req(gpus: int, *, ckpt: bool = True, serving: bool = False, per: int = 8) -> PlacementRequest:
    return PlacementRequest("1", "h100_80gb", gpus, serving=serving, checkpointable=ckpt, gpus_per_node=per)


def test_a_launch_larger_than_the_spot_room_takes_its_whole_nodes_on_spot() -> None:
    split = SpotFirstForCheckpointed(FallbackChain(), split=True)
    a = split.choose(_req(32), _states(spot_used=44))  # 20 GPUs of room: two whole nodes
    assert (a.tier, a.gpus, a.reason) == (Tier.SPOT, 16, "placed_spot_split")
    whole = split.choose(_req(16), _states(spot_used=44))  # fits: the whole launch, as without the split
    assert (whole.tier, whole.gpus, whole.reason) == (Tier.SPOT, 16, "placed_spot_cheapest")
    # less than a node of room, spot out of stock, node size unknown, serving or uncheckpointed: the chain decides
    for req, states in (
        (_req(32), _states(spot_used=60)),
        (_req(32), _states(spot_used=44, spot_in_stock=False)),
        (_req(32, per=0), _states(spot_used=44)),
        (_req(32, ckpt=False, serving=True), _states(spot_used=0)),
        (_req(32, ckpt=False), _states(spot_used=0)),
    ):
        assert split.choose(req, states).tier is Tier.ON_DEMAND
    # without the split (every other placer), a launch larger than the room goes down the chain whole
    plain = SpotFirstForCheckpointed(FallbackChain()).choose(_req(32), _states(spot_used=44))
    assert (plain.tier, plain.gpus) == (Tier.ON_DEMAND, 32)


@given(st.integers(1, 16), st.integers(0, 128), st.sampled_from([4, 8]))
def test_a_split_is_whole_nodes_within_the_room_and_below_the_ask(nodes: int, used: int, per: int) -> None:
    cap = 128
    a = SpotFirstForCheckpointed(FallbackChain(), split=True).choose(_req(nodes * per, per=per), _states(used, cap))
    room = max(0, cap - used)
    if a.tier is Tier.SPOT:
        assert a.gpus % per == 0 and per <= a.gpus <= min(room, nodes * per)
        assert (a.gpus == nodes * per) == (a.reason == "placed_spot_cheapest")
    else:
        assert room < per  # spot is taken whenever a whole node fits


def test_the_world_launches_the_rest_down_the_chain_and_never_past_the_spot_capacity() -> None:
    sc = default_scenario(gpus=128, days=10, seed=4)
    w = World(sc, gpufleet_loop(sc, 4), seed=4)
    prov, fleet = w.provisioner, w.fleet
    launch = prov.launch
    seen: list[int] = []

    def checked(pidx: int, nodes: int, now: int, *, for_queue: bool = True) -> None:
        launch(pidx, nodes, now, for_queue=for_queue)
        pr = fleet.pools[pidx]
        assert pr.capacity_gpus is None or pr.paid_gpus <= pr.capacity_gpus
        seen.append(pidx)

    prov.launch = checked  # type: ignore[method-assign]
    w.run()
    w.check_invariants()
    assert seen and w.metrics.placements.get("placed_spot_split", 0) > 0  # the test means something
