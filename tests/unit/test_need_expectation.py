"""NeedCounts.expected: a SKU's need for fresh nodes averaged over several break-even spans (session 17)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.nodes_payoff import NEED_SPANS, NeedCounts, PayoffAwareNodes
from gpufleet.ports import IdleNode, ScaleDownContext, ScaleUpContext


def test_one_span_is_the_count_within_it() -> None:
    nc = NeedCounts()
    nc.watch(0)
    nc.add(100, 2)
    nc.add(5000, 3)
    assert nc.expected(6000, 3000.0, spans=1) == nc.within(6000, 3000.0) == 3


def test_a_burst_in_the_last_span_weighs_less_than_a_steady_need() -> None:
    burst, steady = NeedCounts(), NeedCounts()
    for c in (burst, steady):
        c.watch(0)
    burst.add(8500, 3)  # three nodes in the last span, none before
    for t in (2500, 5500, 8500):  # one node a span
        steady.add(t, 1)
    # the last three spans of 3000 s before 9000: (3 + 0 + 0) / 3 = 1 against (1 + 1 + 1) / 3 = 1
    assert burst.expected(9000, 3000.0, spans=3) == pytest.approx(1.0)
    assert steady.expected(9000, 3000.0, spans=3) == pytest.approx(1.0)
    assert burst.within(9000, 3000.0) == 3  # the one-span count (session 15) holds three nodes for it


def test_only_spans_already_watched_count() -> None:
    nc = NeedCounts()
    nc.watch(0)
    assert nc.expected(2999, 3000.0) is None  # not one span watched yet
    nc.add(4000, 2)
    assert nc.expected(5000, 3000.0, spans=3) == 2  # 2 x 3000 s not yet watched: the first span alone
    assert nc.expected(6500, 3000.0, spans=3) == pytest.approx((2 + 0) / 2)  # two spans watched
    assert nc.expected(9500, 3000.0, spans=3) == pytest.approx((0 + 2 + 0) / 3)
    with pytest.raises(ValueError):
        nc.expected(9500, 3000.0, spans=0)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 4)), max_size=120),
    st.sampled_from([60.0, 900.0, 3060.0]),
    st.integers(1, 5),
)
def test_expected_is_the_mean_of_the_needs_of_each_watched_span(
    events: list[tuple[int, int]], span: float, spans: int
) -> None:
    nc = NeedCounts()
    nc.watch(0)
    t, seen = 0, []
    for dt, k in events:
        t += dt
        nc.add(t, k)
        seen.append((t, k))
        # the needs of each whole span back (j-th: after t - j x span, up to t - (j - 1) x span), as many as watched
        each = [
            sum(k for u, k in seen if t - j * span < u <= t - (j - 1) * span)
            for j in range(1, spans + 1)
            if t >= j * span
        ]
        got = nc.expected(t, span, spans)
        if not each:
            assert got is None
        else:
            assert got == pytest.approx(sum(each) / len(each))
            assert min(each) <= got + 1e-9 and got <= max(each) + 1e-9


def _idle(node_id: int, idle_for_s: int) -> IdleNode:
    return IdleNode(
        node_id, "aws/us-east-1/h100_80gb/on_demand", "h100_80gb", "on_demand", 8, idle_for_s, 9999, 600, 6.88
    )


def test_the_scaler_holds_by_the_expectation_over_several_spans() -> None:
    """Break-even 3,060 s (on-demand H100, weight 4). Three nodes launched in the last span after a quiet day: the
    one-span count (session 15) holds three idle nodes; over NEED_SPANS spans the expectation is 3 / NEED_SPANS
    (1 with 3 spans) and holds one (a node is held while fewer held nodes than that come before it)."""
    assert NEED_SPANS >= 2
    ns = PayoffAwareNodes.default()
    ns.scale_down(ScaleDownContext(0, "h100_80gb", [], 0, 0, 640, None, 600.0, 0.0))
    now = 86_400
    ns.nodes_to_launch(ScaleUpContext(now - 2000, "h100_80gb", 3, False, 0, 0, 0, 600))
    need = ns.needs["h100_80gb"]
    assert need.within(now, 3060.0) == 3
    e = need.expected(now, 3060.0)
    assert e == pytest.approx(3 / NEED_SPANS)
    nodes = [_idle(1, 900), _idle(2, 700), _idle(3, 800), _idle(4, 1000)]
    ctx = ScaleDownContext(now, "h100_80gb", nodes, 0, 32, 672, None, 600.0, 0.0)
    held = math.ceil(3 / NEED_SPANS)  # the most recently idle ones
    assert sorted(i for i, _ in ns.scale_down(ctx)) == sorted([2, 3, 1, 4][held:])
