"""The serving-replica spread (control/placement.ReplicaSpread through FleetScheduler.place): a preference, never a
filter. It places whenever the rule-free policy places, in the same tier, on a node with room; it takes a node under
the cap whenever the tier has one; it leaves training and the policy's own under-cap choice alone."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.placement import ReplicaSpread
from gpufleet.control.scheduling import Bind, FleetScheduler, FreeGpuIndex, PodAsk

PER = 8
MODEL = "l40s_48gb"


def _index(free: list[int], tier_of: list[int], n_tiers: int) -> FreeGpuIndex:
    index = FreeGpuIndex(1, n_tiers, PER)
    for node, (f, t) in enumerate(zip(free, tier_of, strict=True)):
        index.add(node, 0, t, f)
    return index


def _scheduler(policy: str, spread: ReplicaSpread | None) -> FleetScheduler:
    return FleetScheduler(policy, [MODEL], [PER], np.random.default_rng(0), spread=spread)


nodes = st.lists(st.tuples(st.integers(0, PER), st.integers(0, 2), st.integers(0, 6)), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    nodes=nodes,
    gpus=st.integers(1, PER),
    share=st.sampled_from([0.1, 0.25, 0.5]),
    replicas=st.integers(1, 40),
    tiers=st.permutations([0, 1, 2]),
    policy=st.sampled_from(["bestfit", "packing", "dotprod", "gpufleet"]),
)
def test_never_refuses_what_the_rule_free_policy_places(
    nodes: list[tuple[int, int, int]], gpus: int, share: float, replicas: int, tiers: list[int], policy: str
) -> None:
    free = [f for f, _, _ in nodes]
    tier_of = [t for _, t, _ in nodes]
    crowd = {n: c for n, (_, _, c) in enumerate(nodes) if c}
    index = _index(free, tier_of, 3)
    ask = PodAsk(0, 0, gpus, PER, tuple(tiers), 0, True)
    plain = _scheduler(policy, None)
    spread = _scheduler(policy, ReplicaSpread(share))
    plain.observe(ask)
    spread.observe(ask)
    before = plain.place(ask, index, [0] * len(nodes), crowd, replicas)
    after = spread.place(ask, index, [0] * len(nodes), crowd, replicas)
    assert isinstance(after, Bind) == isinstance(before, Bind)
    if not isinstance(before, Bind) or not isinstance(after, Bind):
        return
    (b,), (a,) = before.nodes, after.nodes
    assert tier_of[a] == tier_of[b]  # the same tier: the rule never moves a replica to dearer capacity
    assert free[a] >= gpus  # on a node with room
    cap = ReplicaSpread(share).cap(replicas)
    tier_has_room_under_cap = any(
        tier_of[n] == tier_of[b] and free[n] >= gpus and crowd.get(n, 0) < cap for n in range(len(nodes))
    )
    if tier_has_room_under_cap:
        assert crowd.get(a, 0) < cap
    else:
        assert a == b  # nothing under the cap: the policy's node
    if crowd.get(b, 0) < cap:
        assert a == b and after.reason == before.reason  # the policy's node is under the cap: unchanged


@settings(max_examples=100, deadline=None)
@given(nodes=nodes, gpus=st.integers(1, PER))
def test_training_and_no_crowd_are_unchanged(nodes: list[tuple[int, int, int]], gpus: int) -> None:
    free = [f for f, _, _ in nodes]
    tier_of = [t for _, t, _ in nodes]
    index = _index(free, tier_of, 3)
    plain = _scheduler("gpufleet", None)
    spread = _scheduler("gpufleet", ReplicaSpread(0.25))
    serving = PodAsk(0, 0, gpus, PER, (0, 1, 2), 0, True)
    assert spread.place(serving, index, [0] * len(nodes)) == plain.place(serving, index, [0] * len(nodes))
    training = PodAsk(1, 0, gpus, PER, (0, 1, 2), 1, False)
    # the world passes no crowd for training; with none the decision is the policy's
    assert spread.place(training, index, [0] * len(nodes), None, 0) == plain.place(training, index, [0] * len(nodes))


def test_the_cap_follows_the_fleet_size() -> None:
    s = ReplicaSpread(0.25)
    assert [s.cap(n) for n in (1, 3, 4, 5, 8, 13, 16, 17)] == [1, 1, 1, 2, 2, 4, 4, 5]


def test_a_packed_node_loses_the_next_replica_to_a_node_under_the_cap() -> None:
    # node 0 (fullest: best fit) already holds 4 of a 16-replica fleet; node 1 holds none
    index = _index([2, 6], [0, 0], 1)
    s = _scheduler("bestfit", ReplicaSpread(0.25))
    ask = PodAsk(0, 0, 1, PER, (0,), 0, True)
    s.observe(ask)
    assert s.place(ask, index, [0, 0], {0: 4}, 16) == Bind((1,), "replica_spread")
    kept = s.place(ask, index, [0, 0], {0: 3}, 16)
    assert isinstance(kept, Bind) and kept.nodes == (0,)  # under the cap: best fit stands
    # the only other room is in the next tier: stays on the packed node (never dearer capacity, never a wait)
    index2 = _index([2, 6], [0, 1], 2)
    s2 = _scheduler("bestfit", ReplicaSpread(0.25))
    ask2 = PodAsk(0, 0, 1, PER, (0, 1), 0, True)
    s2.observe(ask2)
    stays = s2.place(ask2, index2, [0, 0], {0: 4}, 16)
    assert isinstance(stays, Bind) and stays.nodes == (0,)


def test_a_spread_limited_to_reserved_leaves_other_tiers_to_the_policy() -> None:
    from gpufleet.domain.pools import TIER_RANK, Tier

    res, od = TIER_RANK[Tier.RESERVED], TIER_RANK[Tier.ON_DEMAND]
    spread = ReplicaSpread(0.25, (Tier.RESERVED,))
    assert spread.applies(res) and not spread.applies(od)
    n_tiers = len(TIER_RANK)
    for tier, moved in ((res, True), (od, False)):
        index = _index([2, 6], [tier, tier], n_tiers)
        s = _scheduler("bestfit", spread)
        ask = PodAsk(0, 0, 1, PER, (tier,), 0, True)
        s.observe(ask)
        got = s.place(ask, index, [0, 0], {0: 4}, 16)
        assert isinstance(got, Bind) and got.nodes == ((1,) if moved else (0,))
