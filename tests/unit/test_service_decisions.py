"""The service's baseline decisions (placement, bin-packing, forecast bands, windows) as pure functions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpufleet.control.forecasting import demand_quantiles
from gpufleet.control.packing import NodeLoad, WorkloadTraits, fragmentation, suggest_moves
from gpufleet.domain.errors import ValidationError
from gpufleet.service.windows import parse_window_s

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
@example(
    [
        607.7618045382972,
        604.7541032789973,
        151.80447720946313,
        151.80447720946313,
        471.97275061889496,
        471.97275061889496,
    ],
    12,
)
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
