"""gpufleet's node-count rules: gang shortfall scale-up, rent-or-buy hold, learned idle spells, keyed draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscale.idle_spells import IdleSpells, keep_idle_node
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s, shortfall_nodes
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
    with pytest.raises(ValueError):
        rent_or_buy_hold_s(-1.0)


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
