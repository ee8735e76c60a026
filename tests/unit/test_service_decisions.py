"""The service's baseline decisions (placement, bin-packing, forecast bands, windows) as pure functions."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import TIER_RANK, CapacityPool, Tier
from gpufleet.domain.workloads import Priority, WorkloadKind
from gpufleet.ports import PoolState
from gpufleet.service.binpack import NodeLoad, WorkloadTraits, fragmentation, suggest_moves
from gpufleet.service.capacity import demand_quantiles
from gpufleet.service.placement import PlacementRequest, decide
from gpufleet.service.windows import parse_window_s


def _state(pool_id: str, tier: Tier, headroom: int | None, region: str = "r1", price: str = "1") -> PoolState:
    pool = CapacityPool(
        pool_id,
        "p",
        region,
        "h100_80gb",
        tier,
        Decimal(price),
        preemption_rate_per_h=0.05 if tier is Tier.SPOT else 0.0,
    )
    capacity = None if headroom is None else headroom + 4
    return PoolState(pool, gpus_in_use=4, capacity_gpus=capacity, in_stock=True)


states = st.lists(
    st.builds(
        _state,
        pool_id=st.text("abcdef", min_size=1, max_size=6),
        tier=st.sampled_from(list(Tier)),
        headroom=st.one_of(st.none(), st.integers(-8, 64)),
        region=st.sampled_from(["r1", "r2"]),
    ),
    max_size=8,
    unique_by=lambda s: s.pool.id,
)
requests = st.builds(
    PlacementRequest,
    job_class=st.sampled_from(list(WorkloadKind)),
    priority=st.sampled_from(list(Priority)),
    sku_id=st.just("h100_80gb"),
    gpus=st.integers(1, 32),
    checkpointable=st.booleans(),
)


@given(requests, states)
def test_placement_never_breaks_its_rules(req: PlacementRequest, pools: list[PoolState]) -> None:
    d = decide(req, pools)
    if d["pool"] is None:
        assert d["reason"].startswith("queued")
        assert d["fallback"] == []
        assert {s["pool"] for s in d["skipped"]} == {p.pool.id for p in pools}
        return
    chosen = next(p for p in pools if p.pool.id == d["pool"])
    room = None if chosen.capacity_gpus is None else chosen.capacity_gpus - chosen.gpus_in_use
    assert room is None or room >= req.gpus
    if chosen.pool.tier is Tier.SPOT:
        assert req.job_class is WorkloadKind.TRAINING and req.checkpointable
    if req.priority is Priority.LOW:
        assert chosen.pool.tier not in (Tier.ON_DEMAND, Tier.SECONDARY)
    ranks = [TIER_RANK[Tier(f["tier"])] for f in d["fallback"] if f["tier"] is not None]
    assert ranks == sorted(ranks) and all(r >= TIER_RANK[chosen.pool.tier] for r in ranks)
    assert d["fallback"][-1]["pool"] is None  # the chain ends in the queue
    assert d["pool"] not in {f["pool"] for f in d["fallback"]}


def test_placement_walks_tiers_in_order() -> None:
    req = PlacementRequest(WorkloadKind.TRAINING, Priority.HIGH, "h100_80gb", 8, checkpointable=True)
    pools = [
        _state("sec", Tier.SECONDARY, None),
        _state("spot", Tier.SPOT, None),
        _state("od", Tier.ON_DEMAND, 4),
        _state("res", Tier.RESERVED, 8),
    ]
    assert decide(req, pools)["pool"] == "res"
    assert decide(req, pools[:3])["pool"] == "spot"  # on-demand lacks headroom for 8
    serving = PlacementRequest(WorkloadKind.SERVING, Priority.CRITICAL, "h100_80gb", 8)
    assert decide(serving, pools[:3])["pool"] == "sec"


nodes = st.lists(
    st.tuples(st.integers(1, 8), st.lists(st.integers(1, 4), max_size=4)).filter(lambda t: sum(t[1]) <= t[0]),
    min_size=1,
    max_size=8,
)


@given(nodes, st.integers(0, 2))
def test_binpack_moves_respect_capacity_and_free_whole_nodes(spec: list[tuple[int, list[int]]], mode: int) -> None:
    loads = [
        NodeLoad(f"n{i}", total, [(f"w{i}_{j}", g) for j, g in enumerate(allocs)])
        for i, (total, allocs) in enumerate(spec)
    ]
    # mode 0: all checkpointable training; 1: all serving; 2: nothing registered
    traits = {} if mode == 2 else {w: WorkloadTraits(mode == 1, mode == 0) for n in loads for w, _ in n.allocations}
    moves, freed, _skipped = suggest_moves(loads, traits, now_s=1_000)
    if mode != 0:
        assert moves == [] and freed == []  # serving and unknown work never moves
    after = {n.node_id: list(n.allocations) for n in loads}
    for m in moves:
        after[m["from_node"]].remove((m["workload_id"], m["gpus"]))
        after[m["to_node"]].append((m["workload_id"], m["gpus"]))
    totals = {n.node_id: n.gpus_total for n in loads}
    assert all(sum(g for _, g in a) <= totals[nid] for nid, a in after.items())
    assert all(after[nid] == [] for nid in freed)
    assert sum(sum(g for _, g in a) for a in after.values()) == sum(n.used for n in loads)
    assert 0.0 <= fragmentation(loads) <= 1.0


def test_fragmentation_counts_stranded_free_gpus() -> None:
    loads = [NodeLoad("a", 8, [("w", 6)]), NodeLoad("b", 8, [])]
    assert fragmentation(loads) == pytest.approx(2 / 10)


@given(st.lists(st.floats(0, 1000), min_size=0, max_size=60), st.integers(1, 30))
def test_forecast_quantiles_are_ordered_and_non_negative(y: list[float], h: int) -> None:
    band, _ = demand_quantiles(np.array(y), h)
    assert band.shape == (h, 3)
    assert (band >= 0).all()
    assert (band[:, 0] <= band[:, 1] + 1e-9).all() and (band[:, 1] <= band[:, 2] + 1e-9).all()


def test_a_clean_weekly_pattern_is_forecast_as_itself() -> None:
    week = np.array([10, 20, 30, 40, 50, 60, 70], dtype=float)
    band, method = demand_quantiles(np.tile(week, 6), 7)
    assert band[:, 1] == pytest.approx(week, abs=1.0), method


def test_too_short_a_history_falls_back_to_the_baseline() -> None:
    band, method = demand_quantiles(np.array([5.0, 5.0]), 3)
    assert method.startswith("seasonal_naive") and band[:, 1] == pytest.approx([5.0, 5.0, 5.0])


@pytest.mark.parametrize(("text", "seconds"), [("24h", 86400), ("7d", 604800), ("2w", 1209600), ("366d", 31622400)])
def test_windows_parse(text: str, seconds: int) -> None:
    assert parse_window_s(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "0d", "07d", "7 d", " 7d", "7d ", "1.5d", "-1d", "7D", "367d", "9999w"])
def test_windows_are_strict(text: str) -> None:
    with pytest.raises(ValidationError) as exc:
        parse_window_s(text)
    assert exc.value.field == "window"
