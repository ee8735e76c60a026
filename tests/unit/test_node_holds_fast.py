"""The node scaler's capped idle holds without a candidate per node and without ranking when no cap can bind
(session 17) give the holds of the full ranking as first written (session 15)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.node_rules import HoldCandidate, cap_can_bind, capped_holds, expected_use_holds
from gpufleet.autoscale.nodes_payoff import SPOT, NeedCounts, PayoffAwareNodes
from gpufleet.ports import IdleNode


def full_ranking(nodes: Sequence[HoldCandidate]) -> list[bool]:
    """``expected_use_holds`` as session 15 wrote it: every node ranked, every period."""
    keep = [n.idle_for_s < n.buy_s for n in nodes]
    order = sorted(range(len(nodes)), key=lambda i: (nodes[i].price_usd_per_gpu_h, nodes[i].idle_for_s, i))
    held_any = 0
    held_ckpt = 0
    for i in order:
        n = nodes[i]
        if not keep[i]:
            continue
        ahead = held_any + held_ckpt if n.checkpointed_only else held_any
        if n.expected_needs is not None and ahead >= n.expected_needs:
            keep[i] = False
            continue
        if n.checkpointed_only:
            held_ckpt += 1
        else:
            held_any += 1
    return keep


# few distinct values, so that ties in price and idle time (ordered by position) are frequent
candidates = st.lists(
    st.builds(
        HoldCandidate,
        st.sampled_from([1.0, 2.5, 6.88]),
        st.sampled_from([0.0, 100.0, 700.0, 3000.0, 5000.0]),
        st.sampled_from([0.0, 900.0, 3060.0, 6000.0]),
        st.booleans(),
        st.one_of(st.none(), st.integers(0, 8), st.floats(0.0, 8.0)),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(candidates)
def test_expected_use_holds_are_the_full_ranking(nodes: list[HoldCandidate]) -> None:
    assert expected_use_holds(nodes) == full_ranking(nodes)


@settings(max_examples=300, deadline=None)
@given(candidates)
def test_when_no_cap_can_bind_the_full_ranking_keeps_every_node_within_its_break_even(
    nodes: list[HoldCandidate],
) -> None:
    within = [n for n in nodes if n.idle_for_s < n.buy_s]
    needs = [n.expected_needs for n in within if n.expected_needs is not None]
    if not cap_can_bind(len(within), min(needs, default=None)):
        assert full_ranking(within) == [True] * len(within)
    # and capped_holds on the nodes within their break-even is the full ranking of them
    got = capped_holds(
        [n.price_usd_per_gpu_h for n in within],
        [n.idle_for_s for n in within],
        [n.checkpointed_only for n in within],
        [n.expected_needs for n in within],
    )
    assert got == full_ranking(within)


def _past_as_first_written(
    ns: PayoffAwareNodes, idle: list[IdleNode], need: NeedCounts, now: int, wait_price: float
) -> list[IdleNode]:
    """Session 15's scale-down path: a HoldCandidate per idle node, the full ranking (with the need expectation)."""
    cands = []
    seen: dict[float, int | None] = {}
    for n in idle:
        buy = ns.hold_s(n, wait_price)
        if buy not in seen:
            seen[buy] = need.expected(now, buy)
        cands.append(HoldCandidate(n.price_usd_per_gpu_h, n.idle_for_s, buy, n.tier == SPOT, seen[buy]))
    keep = full_ranking(cands)
    return [n for n, k in zip(idle, keep, strict=True) if not k]


node = st.tuples(
    st.integers(0, 8000),  # idle for
    st.sampled_from([120, 600]),  # node start
    st.sampled_from([("on_demand", 6.88), ("spot", 2.5), ("secondary", 4.0), ("on_demand", 4.0)]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(node, max_size=40),
    st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 3)), max_size=30),
    st.sampled_from([0.0, 6.88]),
    st.integers(0, 9000),
)
def test_the_scale_down_path_lets_go_the_nodes_the_full_ranking_lets_go(
    nodes: list[tuple[int, int, tuple[str, float]]],
    events: list[tuple[int, int]],
    wait_price: float,
    watched_s: int,
) -> None:
    ns = PayoffAwareNodes.default()
    need, ref = NeedCounts(), NeedCounts()
    t = 0
    for c in (need, ref):
        c.watch(0)
    for dt, k in events:
        t += dt
        need.add(t, k)
        ref.add(t, k)
    now = t + watched_s
    idle = [
        IdleNode(i, f"aws/us-east-1/h100_80gb/{tier}", "h100_80gb", tier, 8, idle_s, idle_s + 3600, start, price)
        for i, (idle_s, start, (tier, price)) in enumerate(nodes)
    ]
    got = ns._capped_past(idle, need, now, wait_price, {})
    assert got == _past_as_first_written(ns, idle, ref, now, wait_price)
