"""Review (sched): the simulator's placement view (FleetScheduler.place over the free-GPU index) and the quota book.

What a user relies on: a bind names nodes of the pod's own GPU type (its SKU), on tiers it may use, each with room
for it; a gang gets as many whole free nodes as its GPUs fill, all or nothing; the quota book keeps every team
within nominal + borrowing limit, asks borrowers back only for a lender within its nominal and only the shortfall,
and its answers do not depend on the order quotas or pending demand were listed in.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.scheduling import Bind, FleetScheduler, FreeGpuIndex, PodAsk, Wait
from gpufleet.schedule.quota import QuotaBook, TeamQuota

SKUS = ("h100", "a100")
PER = (8, 4)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[tuple[int, int, int, int]], FreeGpuIndex]:
    """Nodes (sku, tier, free GPUs, rack) in a free-GPU index of 2 SKUs and 3 tiers, racks tracked for both."""
    nodes = draw(
        st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 8), st.integers(0, 3)), max_size=24)
    )
    nodes = [(s, t, min(f, PER[s]), r) for s, t, f, r in nodes]
    index = FreeGpuIndex(len(SKUS), 3, max(PER))
    index.track_racks([r for *_, r in nodes], PER)
    for i, (s, t, f, _) in enumerate(nodes):
        index.add(i, s, t, f)
    return nodes, index


@settings(max_examples=300, deadline=None)
@given(
    fleet=fleets(),
    sku=st.integers(0, 1),
    k=st.integers(1, 8),
    gang=st.integers(1, 4),
    tiers=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
    policy=st.sampled_from(["bestfit", "packing", "dotprod", "gpufleet"]),
)
def test_a_bind_names_nodes_of_the_pods_own_type_with_room_on_its_tiers(
    fleet: tuple[list[tuple[int, int, int, int]], FreeGpuIndex],
    sku: int,
    k: int,
    gang: int,
    tiers: list[int],
    policy: str,
) -> None:
    nodes, index = fleet
    per = PER[sku]
    gpus = min(k, per) if gang == 1 else per * gang
    fs = FleetScheduler(policy, SKUS, PER, np.random.default_rng(0))
    ask = PodAsk(0, sku, gpus, per, tuple(tiers), 1, False)
    got = fs.place(ask, index, [r for *_, r in nodes])
    assert got.reason
    fitting = [i for i, (s, t, f, _) in enumerate(nodes) if s == sku and t in tiers and f >= min(gpus, per)]
    if isinstance(got, Wait):
        assert len(fitting) < (1 if gpus <= per else gpus // per)
        return
    assert isinstance(got, Bind)
    assert len(got.nodes) == max(1, gpus // per) == len(set(got.nodes))
    for n in got.nodes:
        s, t, f, _ = nodes[n]
        assert s == sku and t in tiers and f >= min(gpus, per)  # own type, an allowed tier, room for it


def test_a_pod_of_twelve_gpus_on_eight_gpu_nodes_is_not_bound_to_one_node() -> None:
    """Review (fixed), the defect: a pod larger than a node is a gang of whole nodes: 12 GPUs on 8-GPU nodes got ``need = 12 // 8 = 1`` node,
    a Bind of one node (8 GPUs) for a pod that asked for 12. It has no whole-node shape: it must wait, with a
    reason, not run on two thirds of what it asked for."""
    index = FreeGpuIndex(1, 1, 8)
    for n in range(3):
        index.add(n, 0, 0, 8)
    fs = FleetScheduler("bestfit", ["h100"], [8], np.random.default_rng(0))
    ask = PodAsk(0, 0, 12, 8, (0,), 1, False)
    assert fs.place(ask, index, [0, 0, 0]) == Wait("gang_not_whole_nodes")
    gang = FleetScheduler("bestfit", ["h100"], [8], np.random.default_rng(0), gang_preemption=True)
    got = gang.preempt_gang(ask, 0, {}, 0, 600)  # nor does it empty whole nodes for it: short = 12 // 8 was 1
    assert got.reason == "gang_not_whole_nodes" and not hasattr(got, "nodes")


def test_degenerate_asks_get_a_decision_with_a_reason() -> None:
    """A huge gang and an ask on tiers that hold no node wait with a reason; nothing raises."""
    index = FreeGpuIndex(1, 2, 8)
    index.add(0, 0, 0, 8)
    fs = FleetScheduler("bestfit", ["h100"], [8], np.random.default_rng(0))
    assert fs.place(PodAsk(0, 0, 8 * 10**9, 8, (0, 1), 1, False), index, [0]) == Wait("gang_no_fit")
    assert fs.place(PodAsk(0, 0, 1, 8, (1,), 1, False), index, [0]) == Wait("no_fit")
    assert fs.place(PodAsk(0, 0, 1, 8, (), 1, False), index, [0]) == Wait("no_fit")


# ------------------------------------------------------------------------------------------------- quota book

quotas = st.lists(
    st.tuples(
        st.integers(0, 12),  # nominal
        st.one_of(st.none(), st.integers(0, 12)),  # borrowing limit
        st.one_of(st.none(), st.integers(0, 12)),  # lending limit
        st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0]),  # weight
    ),
    min_size=1,
    max_size=4,
)


def _book(qs: list[tuple[int, int | None, int | None, float]], order: list[int]) -> QuotaBook:
    book = QuotaBook()
    for i in order:
        nom, borrow, lend, w = qs[i]
        book.add(TeamQuota(f"t{i}", "c", "h100", nom, borrow, lend, w))
    return book


@settings(max_examples=300, deadline=None)
@given(qs=quotas, ops=st.lists(st.tuples(st.integers(0, 3), st.integers(-6, 10)), max_size=30), seed=st.integers())
def test_quota_decisions_keep_every_team_in_bounds_reclaim_only_the_shortfall_and_ignore_listing_order(
    qs: list[tuple[int, int | None, int | None, float]], ops: list[tuple[int, int]], seed: int
) -> None:
    """The same requests against the same quotas added in another order get the same answers. Every admission keeps
    the team within nominal + borrowing limit; a reclaim plan is made only for a team that stays within its nominal,
    asks only borrowers, takes from each no more than it borrows, and takes back exactly what the pool is short."""
    n = len(qs)
    order = list(range(n))
    other = order[:]
    random.Random(seed).shuffle(other)
    a, b = _book(qs, order), _book(qs, other)
    for who, delta in ops:
        team = f"t{who % n}"
        key = (team, "h100")
        if delta <= 0:
            give = min(-delta, a.usage[key])
            a.release(team, "h100", give)
            b.release(team, "h100", give)
            continue
        q = a.quotas[key]
        before = dict(a.usage)
        pool = a.pool_gpus("c", "h100")
        short = sum(a.pool_use(m) for m in a.members("c", "h100")) - a.pool_use(q) + a.pool_use(q, before[key] + delta)
        short -= pool
        got = a.admit(team, "h100", delta)
        assert got == b.admit(team, "h100", delta)
        assert got.reason
        if got.decision == "admit_after_reclaim":
            assert before[key] + delta <= q.nominal_gpus  # a lender within its own nominal
            assert sum(r.gpus for r in got.reclaims) == short > 0
            for r in got.reclaims:
                m = a.quotas[(r.team, "h100")]
                assert r.team != team and 0 < r.gpus <= before[(r.team, "h100")] - m.nominal_gpus
        elif got.decision == "admit":
            assert not got.reclaims and short <= 0
        for m in a.members("c", "h100"):
            u = a.usage[(m.team, "h100")]
            assert u >= 0
            if m.borrowing_limit_gpus is not None:
                assert u <= m.nominal_gpus + m.borrowing_limit_gpus
        assert sum(a.pool_use(m) for m in a.members("c", "h100")) <= pool
    assert a.usage == b.usage


@settings(max_examples=300, deadline=None)
@given(
    qs=quotas,
    used=st.lists(st.integers(0, 12), min_size=4, max_size=4),
    pending=st.lists(st.integers(-2, 20), min_size=4, max_size=4),
    seed=st.integers(),
)
def test_fair_share_splits_only_the_free_pool_within_headroom_whatever_the_listing_order(
    qs: list[tuple[int, int | None, int | None, float]], used: list[int], pending: list[int], seed: int
) -> None:
    """QuotaBook.fair_share: the shares add up to at most the pool capacity nobody uses, none above a team's demand
    or its borrowing headroom, and the answer does not depend on the order teams' demand is listed in."""
    n = len(qs)
    book = _book(qs, list(range(n)))
    for i in range(n):
        if used[i] and book.check(f"t{i}", "h100", used[i]).decision == "admit":
            book.admit(f"t{i}", "h100", used[i])
    want = {f"t{i}": pending[i] for i in range(n)}
    items = list(want.items())
    random.Random(seed).shuffle(items)
    got = book.fair_share("c", "h100", want)
    assert got == book.fair_share("c", "h100", dict(items))
    free = book.pool_gpus("c", "h100") - sum(book.pool_use(m) for m in book.members("c", "h100"))
    assert sum(got.values()) <= max(0, free)
    for team, g in got.items():
        q = book.quotas[(team, "h100")]
        assert 0 <= g <= max(0, want[team])
        if q.borrowing_limit_gpus is not None:
            assert book.usage[(team, "h100")] + g <= q.nominal_gpus + q.borrowing_limit_gpus
