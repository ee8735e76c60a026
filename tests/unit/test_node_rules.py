"""gpufleet's node-count rules: gang shortfall scale-up, rent-or-buy hold, learned idle spells, keyed draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscale.idle_spells import IdleSpells, keep_idle_node
from gpufleet.autoscale.node_rules import (
    MOVE_REASON,
    HoldCandidate,
    expected_use_holds,
    moves_to_reserved,
    rent_or_buy_hold_s,
    shortfall_nodes,
)
from gpufleet.ports import RunningOnLaunched
from gpufleet.sim.crn import FAIL, keyed_exponential, keyed_uniform


@given(st.integers(0, 64), st.integers(0, 64), st.integers(0, 64))
def test_shortfall_covers_the_need_and_never_overshoots(need: int, free: int, starting: int) -> None:
    k = shortfall_nodes(need, free, starting)
    assert 0 <= k <= need
    assert k + free + starting >= need  # free + starting + launched hold the whole gang
    if k > 0:
        assert k + free + starting == need  # no node more than the gap


@given(st.integers(0, 64), st.integers(0, 64), st.integers(0, 64), st.integers(0, 64), st.integers(0, 8))
def test_freeing_nodes_only_ever_lower_the_launch(need: int, free: int, starting: int, freeing: int, more: int) -> None:
    k = shortfall_nodes(need, free, starting, freeing)
    assert k <= shortfall_nodes(need, free, starting)  # waiting for freeing nodes never adds a launch
    assert k + free + starting + freeing >= need  # every member has a node on its way
    assert shortfall_nodes(need, free, starting, freeing + more) <= k  # monotone in what is on its way
    assert shortfall_nodes(need, free, starting, freeing) == shortfall_nodes(need, free + freeing, starting)


def test_shortfall_examples_and_bad_input() -> None:
    assert shortfall_nodes(8, 5, 0) == 3  # the foundation would launch 8
    assert shortfall_nodes(8, 5, 1) == 2
    assert shortfall_nodes(4, 6, 0) == 0
    assert shortfall_nodes(8, 5, 1, 1) == 1  # one node frees before a launched one would be ready
    assert shortfall_nodes(8, 5, 1, 4) == 0
    with pytest.raises(ValueError):
        shortfall_nodes(-1, 0, 0)
    with pytest.raises(ValueError):
        shortfall_nodes(1, 0, 0, -1)


def test_rent_or_buy_hold_is_the_buy_cost_in_rent_seconds() -> None:
    # a relaunch bills the 600 s start and delays the work as long (weight 1): hold 1,200 s, plus min billing
    assert rent_or_buy_hold_s(600.0) == 1200.0
    assert rent_or_buy_hold_s(600.0, min_billing_s=60.0) == 1260.0
    assert rent_or_buy_hold_s(600.0, delay_weight=0.0) == 600.0
    assert rent_or_buy_hold_s(21_600.0, 60.0, 1.0) == 43_260.0  # a 6 h start is held for 12 h
    # a spot node (1.25 $/GPU-h) whose relaunch delays work priced at on-demand (6.88): held 5.5x as long
    assert rent_or_buy_hold_s(600.0, 60.0, 1.0, 6.88 / 1.25) == pytest.approx(660.0 + 600.0 * 5.504)
    with pytest.raises(ValueError):
        rent_or_buy_hold_s(-1.0)
    with pytest.raises(ValueError):
        rent_or_buy_hold_s(600.0, wait_price_ratio=-1.0)


@given(st.floats(0, 1e5), st.floats(0, 1e4), st.floats(0, 10), st.floats(0, 10), st.floats(0, 10))
def test_the_wait_price_ratio_only_lengthens_the_hold_when_above_one(
    start: float, bill: float, w: float, r: float, more: float
) -> None:
    assert rent_or_buy_hold_s(start, bill, w, 1.0) == pytest.approx((1.0 + w) * start + bill)  # the old rule
    assert rent_or_buy_hold_s(start, bill, w, r + more) >= rent_or_buy_hold_s(start, bill, w, r)
    assert rent_or_buy_hold_s(start, bill, w, r) >= start + bill  # never below the billed start


runs = st.lists(
    st.builds(
        RunningOnLaunched,
        pod_id=st.integers(0, 10_000),
        gang=st.booleans(),
        launched_nodes=st.integers(0, 40),
        reported_left_s=st.integers(0, 30 * 86_400),
        redo_s=st.integers(0, 3_600),
    ),
    max_size=12,
    unique_by=lambda r: r.pod_id,
)


@given(runs, st.lists(st.integers(0, 20_000), max_size=60))
def test_moves_fit_the_idle_reserved_nodes_and_take_only_long_gangs_after_a_checkpoint(
    running: list[RunningOnLaunched], idle_s: list[int]
) -> None:
    out = moves_to_reserved(running, idle_s)
    by_id = {r.pod_id: r for r in running}
    chosen = [by_id[p] for p, _ in out]
    assert len({p for p, _ in out}) == len(out) and all(reason == MOVE_REASON for _, reason in out)
    assert sum(r.launched_nodes for r in chosen) <= sum(1 for s in idle_s if s >= 3_600)
    assert all(r.gang and r.launched_nodes > 0 and r.reported_left_s >= 86_400 and r.redo_s <= 900 for r in chosen)
    left = sum(1 for s in idle_s if s >= 3_600) - sum(r.launched_nodes for r in chosen)
    for r in running:  # greedy: a qualifying run left out did not fit what was still free
        if r.pod_id not in by_id or r in chosen:
            continue
        if r.gang and r.launched_nodes > 0 and r.reported_left_s >= 86_400 and r.redo_s <= 900:
            assert r.launched_nodes > left


def test_moves_examples_and_bad_input() -> None:
    long_gang = RunningOnLaunched(1, True, 3, 5 * 86_400, 100)
    assert moves_to_reserved([long_gang], [4_000] * 3) == [(1, MOVE_REASON)]
    assert moves_to_reserved([long_gang], [4_000] * 2 + [100]) == []  # the third node is only between jobs
    assert moves_to_reserved([RunningOnLaunched(1, True, 3, 5 * 86_400, 1_200)], [4_000] * 3) == []  # mid-interval
    bigger = RunningOnLaunched(2, True, 2, 20 * 86_400, 0)
    assert moves_to_reserved([long_gang, bigger], [4_000] * 3) == [(2, MOVE_REASON)]  # the longer-paying first
    with pytest.raises(ValueError):
        moves_to_reserved([long_gang], [-1])


@given(st.floats(0, 1e5), st.floats(0, 1e5), st.floats(0, 10))
def test_rent_or_buy_hold_grows_with_start_time_and_weight(start: float, extra: float, w: float) -> None:
    assert rent_or_buy_hold_s(start + extra, 0.0, w) >= rent_or_buy_hold_s(start, 0.0, w)
    assert rent_or_buy_hold_s(start, 0.0, w + 1.0) >= rent_or_buy_hold_s(start, 0.0, w)
    assert rent_or_buy_hold_s(start, 0.0, w) >= start  # never shorter than the billed start it saves


def test_kaplan_meier_with_censoring_matches_hand_computation() -> None:
    sp = IdleSpells(grid_s=1.0)
    for d, reused in ((1.0, True), (2.0, True), (3.0, False), (4.0, True)):
        sp.add(d, reused)
    s, integral = sp.survival()
    # at t=1: 3/4 survive; t=2: x 2/3 = 1/2; t=3 censored (no drop); t=4: at risk 1, dies -> 0
    np.testing.assert_allclose(s, [1.0, 0.75, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(integral, [0.0, 0.875, 1.5, 2.0, 2.25])


def test_keep_idle_node_falls_back_to_ski_rental_without_data() -> None:
    sp = IdleSpells()
    assert keep_idle_node(sp, 600.0, 1200.0)
    assert not keep_idle_node(sp, 1200.0, 1200.0)


def test_keep_idle_node_follows_the_learned_gaps() -> None:
    soon = IdleSpells()
    for _ in range(50):
        soon.add(900.0, reused=True)  # every idle node was reused after 15 min
    assert keep_idle_node(soon, 600.0, 1200.0)  # reuse in 5 min is cheaper than a relaunch
    never = IdleSpells()
    for _ in range(50):
        never.add(3600.0, reused=False)  # nodes idle for an hour were terminated, never reused
    assert not keep_idle_node(never, 600.0, 1200.0)
    assert not keep_idle_node(soon, 2000.0, 1200.0)  # past every spell in the data: nothing says work comes


def test_idle_spells_window_and_bad_input() -> None:
    sp = IdleSpells(window=3)
    for d in (1.0, 2.0, 3.0, 4.0):
        sp.add(d, True)
    assert len(sp) == 3 and sp.reuses == 3
    with pytest.raises(ValueError):
        sp.add(-1.0, True)
    with pytest.raises(ValueError):
        IdleSpells(window=0)


def test_keyed_draws_are_reproducible_distinct_and_exponential() -> None:
    assert keyed_uniform(7, 1, 2, 3) == keyed_uniform(7, 1, 2, 3)
    assert keyed_uniform(7, 1, 2, 3) != keyed_uniform(7, 1, 2, 4)
    assert keyed_uniform(7, 1, 2, 3) != keyed_uniform(8, 1, 2, 3)
    u = np.array([keyed_uniform(1, FAIL, 0, k, 0) for k in range(20_000)])
    assert u.min() > 0.0 and u.max() < 1.0
    # uniform: each decile holds 10% +- 5 sd (binomial sd of a decile count = 42)
    counts = np.histogram(u, bins=10, range=(0.0, 1.0))[0]
    assert np.all(np.abs(counts - 2000) < 5 * math.sqrt(20_000 * 0.1 * 0.9))
    x = np.array([keyed_exponential(100.0, 3, FAIL, 1, k, 0) for k in range(20_000)])
    assert abs(x.mean() - 100.0) < 5 * 100.0 / math.sqrt(20_000)


def _cand(price: float, idle_s: float, buy_s: float, spot: bool, needs: float | None) -> HoldCandidate:
    return HoldCandidate(price, idle_s, buy_s, spot, needs)


def test_expected_use_holds_only_as_many_nodes_as_needs_within_the_buy_time() -> None:
    nodes = [_cand(6.88, 700.0 + i, 3060.0, False, 2.0) for i in range(5)]
    assert expected_use_holds(nodes) == [True, True, False, False, False]  # the two most recently idle
    nodes[4] = nodes[4]._replace(idle_for_s=3100.0)  # past its break-even: never held
    assert expected_use_holds([n._replace(expected_needs=None) for n in nodes]) == [True] * 4 + [False]
    # cheaper nodes that host anything come first; a spot node never stands ahead of an on-demand one
    mixed = [
        _cand(6.88, 700.0, 3060.0, False, 1.0),
        _cand(2.95, 900.0, 90_000.0, False, 1.0),
        _cand(1.25, 800.0, 14_000.0, True, 1.0),
    ]
    assert expected_use_holds(mixed) == [False, True, True]
    assert expected_use_holds([_cand(6.88, 700.0, 3060.0, False, 0.0)]) == [False]  # nothing needed lately
    with pytest.raises(ValueError):
        expected_use_holds([_cand(6.88, -1.0, 3060.0, False, None)])


_cands = st.lists(
    st.builds(
        HoldCandidate,
        st.sampled_from([1.25, 2.95, 6.88]),
        st.floats(0, 20_000),
        st.floats(0, 20_000),
        st.booleans(),
        st.one_of(st.none(), st.floats(0, 12)),
    ),
    max_size=24,
)


@given(_cands, st.floats(0, 6))
def test_expected_use_holds_never_beyond_the_break_even_and_monotone_in_needs(
    nodes: list[HoldCandidate], more: float
) -> None:
    keep = expected_use_holds(nodes)
    assert len(keep) == len(nodes)
    for n, k in zip(nodes, keep, strict=True):
        assert not k or n.idle_for_s < n.buy_s  # never held past its own break-even
    # the nodes held that host anything never outnumber the largest expected need among them
    held_any = [n for n, k in zip(nodes, keep, strict=True) if k and not n.checkpointed_only]
    if held_any and all(n.expected_needs is not None for n in held_any):
        assert len(held_any) <= math.ceil(max(n.expected_needs or 0.0 for n in held_any))
    # with one expected count for all (one buy time), expecting more needs never lets a held node go
    same = [n._replace(expected_needs=2.0) for n in nodes]
    richer = [n._replace(expected_needs=2.0 + more) for n in nodes]
    assert all(b or not a for a, b in zip(expected_use_holds(same), expected_use_holds(richer), strict=True))
    # without counts, the break-even alone
    plain = expected_use_holds([n._replace(expected_needs=None) for n in nodes])
    assert plain == [n.idle_for_s < n.buy_s for n in nodes]
