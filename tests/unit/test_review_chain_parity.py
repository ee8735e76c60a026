"""Review (chain): the service's placement decides as the simulator's placer for the same pool states.

The simulator's gpufleet loop launches with ``SpotFirstForCheckpointed(DegradingChain(), split=True)``
(``control/loop.py``); the service answers ``POST /v1/placement/recommendations`` with
``control.admission.place`` (docs/api.md: "the same decision code as the simulator"). Same pools, same request:
the same pool, or the service recommends capacity the loop would not buy.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from gpufleet.control.admission import ChainPlacementRequest, PoolHeadroom, place
from gpufleet.control.placement import SpotFirstForCheckpointed
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.workloads import Priority, WorkloadKind
from gpufleet.place.chain import DegradingChain
from gpufleet.ports import PlacementRequest, PoolState

NOW_S = 1_767_225_600
POOLS = {p.tier: p for p in default_pools("h100_80gb")}  # reserved 4.36, on-demand 6.88, spot 1.25, secondary 2.95


def _headroom(st: PoolState) -> PoolHeadroom:
    """The service's mapping of a pool's stored state (service/placement_chain.py): free = capacity - in use,
    utilization = in use / capacity (0 unbounded), stockout = not in stock."""
    cap = st.capacity_gpus
    free = math.inf if cap is None else float(cap - st.gpus_in_use)
    util = 0.0 if not cap else min(1.0, st.gpus_in_use / cap)
    return PoolHeadroom(st.pool, free, util, stockout=not st.in_stock)


def _both(states: list[PoolState], *, serving: bool, checkpointable: bool, gpus: int) -> tuple[str | None, str | None]:
    """(the simulator's pool, the service's pool) for one request over the same launched pools; the service also
    sees the SKU's reserved pool, full (the simulator uses reserved nodes before it launches anything)."""
    sim = SpotFirstForCheckpointed(DegradingChain(), split=True).choose(
        PlacementRequest("w", "h100_80gb", gpus, serving, checkpointable), states
    )
    reserved = PoolState(POOLS[Tier.RESERVED], 0, 0, True)
    kind = WorkloadKind.SERVING if serving else WorkloadKind.TRAINING
    req = ChainPlacementRequest(kind, Priority.NORMAL, "h100_80gb", gpus, checkpointable=checkpointable)
    svc = place(req, [_headroom(s) for s in (reserved, *states)], now_s=NOW_S)
    return sim.pool_id, svc["pool"]


def test_checkpointed_training_is_placed_on_cheaper_spot_as_the_simulator_does() -> None:
    """Review (fixed), the defect: the service walked reserved -> on-demand -> spot for checkpointed training, so
    with spot in stock at $1.25 it recommended on-demand at $6.88 per GPU-hour, 5.5 times the price, where the
    simulator's loop (spot first for checkpointed training where spot is the cheaper tier) launches on spot."""
    states = [PoolState(POOLS[t], 0, None, True) for t in (Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)]
    sim, svc = _both(states, serving=False, checkpointable=True, gpus=8)
    assert sim == POOLS[Tier.SPOT].id
    assert svc == sim


@pytest.mark.parametrize("serving", [True, False])
def test_spot_never_reaches_serving_or_uncheckpointed_training(serving: bool) -> None:
    """Spot stays checkpointed training's only: with spot the cheapest tier and the only one with room, serving and
    uncheckpointed training queue in both worlds, and with on-demand in stock they take on-demand in both."""
    checkpointable = False
    full_od = [
        PoolState(POOLS[Tier.ON_DEMAND], 8, 8, True),
        PoolState(POOLS[Tier.SPOT], 0, None, True),
        PoolState(POOLS[Tier.SECONDARY], 0, 0, True),
    ]
    sim, svc = _both(full_od, serving=serving, checkpointable=checkpointable, gpus=8)
    assert svc == sim
    assert svc is None
    room = [PoolState(POOLS[t], 0, None, True) for t in (Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)]
    sim, svc = _both(room, serving=serving, checkpointable=checkpointable, gpus=8)
    assert svc == sim
    assert svc == POOLS[Tier.ON_DEMAND].id


def test_a_nearly_full_on_demand_pool_with_room_is_not_passed_over_for_a_dearer_secondary() -> None:
    """Review (fixed), the defect: the service's chain skipped a pool at 95 % utilization or more
    (``pool_utilization``) even when the request fits in it, while the simulator's chain has that trigger off: an
    on-demand pool at 96 of 100 GPUs sent a 4-GPU serving replica to a secondary provider at $9.00 instead of
    on-demand at $6.88, secondary before on-demand with room at a lower price."""
    dear = CapacityPool(
        "neo/r2/h100_80gb/secondary", "neo", "r2", "h100_80gb", Tier.SECONDARY, Decimal("9.00"), lead_time_s=3600
    )
    states = [PoolState(POOLS[Tier.ON_DEMAND], 96, 100, True), PoolState(dear, 0, None, True)]
    sim, svc = _both(states, serving=True, checkpointable=False, gpus=4)
    assert sim == POOLS[Tier.ON_DEMAND].id
    assert svc == sim


def test_a_reserved_pool_with_room_is_used_before_on_demand() -> None:
    """Review (fixed), the defect (same trigger): a reserved pool at 96 of 100 GPUs was skipped with
    ``pool_utilization`` and a 4-GPU job sent to on-demand at $6.88 per GPU-hour while 4 reserved GPUs, paid
    whether used or not, stayed idle."""
    reserved = PoolHeadroom(POOLS[Tier.RESERVED], 4.0, 0.96)
    od = PoolHeadroom(POOLS[Tier.ON_DEMAND], math.inf, 0.0)
    req = ChainPlacementRequest(WorkloadKind.TRAINING, Priority.NORMAL, "h100_80gb", 4)
    d = place(req, [reserved, od], now_s=NOW_S)
    assert (d["action"], d["pool"], d["reason"]) == ("place", POOLS[Tier.RESERVED].id, "placed_reserved")
    assert d["skipped"] == []
