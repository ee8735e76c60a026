"""Erlang C staffing (autoscale/erlang.py): textbook values and the staffing rule's contract."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscale.erlang import erlang_c, servers_for, wait_exceeds


def test_erlang_c_textbook_values() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = utilization
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(10, 8.0) == pytest.approx(0.4092, abs=1e-4)
    assert erlang_c(3, 3.0) == 1.0 and erlang_c(5, 0.0) == 0.0


def test_wait_tail_is_exponential_in_the_wait() -> None:
    # M/M/1 with load 0.5 and mean service 10 s: P(W > t) = 0.5 exp(-0.05 t)
    assert wait_exceeds(1, 0.5, 20.0, 10.0) == pytest.approx(0.5 * math.exp(-1.0))


@given(st.floats(0.001, 200.0), st.floats(0.0, 30.0), st.floats(0.1, 120.0), st.floats(1e-4, 0.5))
def test_servers_for_is_the_fewest_that_meet_the_budget(load: float, wait_s: float, service_s: float, b: float) -> None:
    n = servers_for(load, wait_s, service_s, b)
    assert n > load
    assert wait_exceeds(n, load, wait_s, service_s) <= b + 1e-12
    if n - 1 > load:
        assert wait_exceeds(n - 1, load, wait_s, service_s) > b
    assert servers_for(load * 1.5, wait_s, service_s, b) >= n  # more load never needs fewer servers
    assert servers_for(0.0, wait_s, service_s, b) == 0
