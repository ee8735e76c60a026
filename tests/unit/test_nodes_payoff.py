"""gpufleet's node scaler through the NodeScaler port, and the world's use of it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.idle_spells import IdleSpells
from gpufleet.autoscale.nodes_baseline import IdleTimeoutScaleDown
from gpufleet.autoscale.nodes_payoff import NeedCounts, PayoffAwareNodes
from gpufleet.ports import IdleNode, MoveContext, RunningOnLaunched, ScaleDownContext, ScaleUpContext
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.run import baseline_loop
from gpufleet.sim.world import World

POOL = "aws/us-east-1/h100_80gb/on_demand"


def idle(node_id: int, idle_for_s: int, start_s: int = 600, tier: str = "on_demand", price: float = 6.88) -> IdleNode:
    pool = POOL.replace("on_demand", tier)
    return IdleNode(node_id, pool, "h100_80gb", tier, 8, idle_for_s, idle_for_s + 3600, start_s, price)


def ctx(now: int, nodes: list[IdleNode], pending: int = 0, wait_price: float = 0.0) -> ScaleDownContext:
    cap = 640 + 8 * len(nodes)
    return ScaleDownContext(now, "h100_80gb", nodes, pending, 8 * len(nodes), cap, None, 600.0, wait_price)


def up(need: int, gang: bool, free: int, starting: int, freeing: int = 0) -> ScaleUpContext:
    return ScaleUpContext(0, "h100_80gb", need, gang, free, starting, freeing, 600)


def test_gangs_get_only_the_shortfall_single_pods_their_node() -> None:
    ns = PayoffAwareNodes.default()
    assert ns.nodes_to_launch(up(8, True, 5, 1)) == 2
    assert ns.nodes_to_launch(up(8, True, 9, 0)) == 0
    assert ns.nodes_to_launch(up(1, False, 0, 3)) == 1  # the world gates single pods on in-flight GPUs
    assert IdleTimeoutScaleDown().nodes_to_launch(up(8, True, 5, 1)) == 8  # the baseline: the full count


def test_nodes_freeing_before_a_launch_is_ready_are_waited_for() -> None:
    ns = PayoffAwareNodes.default()
    assert ns.nodes_to_launch(up(8, True, 5, 1, freeing=1)) == 1
    assert ns.nodes_to_launch(up(8, True, 5, 1, freeing=3)) == 0
    assert ns.nodes_to_launch(up(1, False, 0, 0, freeing=1)) == 0  # a single pod waits for the freeing node
    assert ns.nodes_to_launch(up(1, False, 0, 0, freeing=0)) == 1
    assert PayoffAwareNodes(wait_for_freeing=False).nodes_to_launch(up(8, True, 5, 1, freeing=3)) == 2
    assert IdleTimeoutScaleDown().nodes_to_launch(up(8, True, 5, 1, freeing=3)) == 8


def test_holds_until_the_rent_or_buy_break_even_then_terminates() -> None:
    ns = PayoffAwareNodes.default()  # weight 4: break-even 600 + 4 x 600 + 60 = 3,060 s
    assert ns.scale_down(ctx(3000, [idle(1, 3000)])) == []
    assert ns.held == {"rent_or_buy_hold": 1}
    assert ns.scale_down(ctx(3120, [idle(1, 3120)])) == [(1, "unneeded_below_threshold")]
    # the terminated spell is recorded as censored at its length
    assert len(ns.spells[POOL]) == 1 and ns.spells[POOL].reuses == 0


def test_nothing_goes_while_work_is_pending() -> None:
    ns = PayoffAwareNodes.default()
    assert ns.scale_down(ctx(9000, [idle(1, 9000)], pending=8)) == []
    assert ns.held == {"needed_by_pending_work": 1}


def test_gangs_out_of_reach_do_not_hold_idle_nodes_beyond_their_break_even() -> None:
    """Queued gangs that cannot complete from what is at hand wait for running work to free nodes; an idle node
    held for them does not hasten that, so it goes by the ordinary holds. Any other queued work still holds."""
    ns = PayoffAwareNodes.default()  # break-even 3,060 s
    gangs = replace(ctx(9000, [idle(1, 9000)], pending=64), unreachable_gang_gpus=64)
    assert ns.scale_down(gangs) == [(1, "unneeded_below_threshold")]
    assert ns.held == {"pending_gang_out_of_reach": 1}
    ns = PayoffAwareNodes.default()
    within = replace(ctx(3000, [idle(1, 3000)], pending=64), unreachable_gang_gpus=64)
    assert ns.scale_down(within) == []  # within its break-even: held as with nothing queued
    assert ns.held == {"pending_gang_out_of_reach": 1, "rent_or_buy_hold": 1}
    ns = PayoffAwareNodes.default()
    mixed = replace(ctx(9000, [idle(1, 9000)], pending=72), unreachable_gang_gpus=64)  # 8 GPUs of other work
    assert ns.scale_down(mixed) == []
    assert ns.held == {"needed_by_pending_work": 1}


@settings(max_examples=200, deadline=None)
@given(
    pending=st.integers(0, 512),
    unreachable=st.integers(0, 512),
    idle_for=st.lists(st.integers(600, 20_000), min_size=1, max_size=6),
)
def test_pending_work_an_idle_node_could_serve_always_holds_every_idle_node(
    pending: int, unreachable: int, idle_for: list[int]
) -> None:
    """Invariant: while some queued work is not an out-of-reach gang, nothing goes; otherwise what goes is what
    goes with nothing queued (the same nodes, the same reasons)."""
    unreachable = min(unreachable, pending)
    nodes = [idle(i, t) for i, t in enumerate(idle_for)]
    now = max(idle_for)
    out = PayoffAwareNodes.default().scale_down(
        replace(ctx(now, nodes, pending=pending), unreachable_gang_gpus=unreachable)
    )
    if pending > unreachable:
        assert out == []
    else:
        assert out == PayoffAwareNodes.default().scale_down(ctx(now, nodes))


def test_no_idle_node_of_an_out_of_stock_pool_is_let_go() -> None:
    ns = PayoffAwareNodes.default()
    nodes = [idle(1, 9000), idle(2, 9000, tier="spot", price=1.25)]
    out = ns.scale_down(replace(ctx(9000, nodes), out_of_stock_pools=frozenset({POOL})))
    assert [n for n, _ in out] == [2]  # the spot node goes; the on-demand node could not be had back
    assert ns.held["out_of_stock_hold"] == 1
    assert [n for n, _ in ns.scale_down(ctx(9600, [idle(1, 9600)]))] == [1]  # stock is back: it goes


def test_a_node_that_leaves_the_idle_list_was_reused() -> None:
    ns = PayoffAwareNodes.default()
    ns.scale_down(ctx(900, [idle(1, 600), idle(2, 600)]))
    ns.scale_down(ctx(1200, [idle(2, 900)]))  # node 1 took work between the two looks; node 2 is held
    sp = ns.spells[POOL]
    assert len(sp) == 1 and sp.reuses == 1
    assert sp.survival()[0][-1] == 0.0  # the one spell ended in reuse...
    assert len(sp.survival()[0]) == 14  # ...after 600 s + half the 300 s between looks = 750 s (grid 60 s)


def test_the_world_asks_the_node_scaler_how_many_nodes_to_launch() -> None:
    sc = steady_scenario(gpus=256, days=3, seed=3)
    asked: list[ScaleUpContext] = []

    class Recording(IdleTimeoutScaleDown):
        def nodes_to_launch(self, c: ScaleUpContext) -> int:
            asked.append(c)
            return 0  # never launch

    loop = baseline_loop(sc, 3)
    loop.node_scaler = Recording()
    w = World(sc, loop)
    w.run()
    assert asked and all(c.need_nodes >= 1 and c.free_whole_nodes >= 0 for c in asked)
    assert any(c.gang for c in asked)
    assert sum(pr.launched for pr in w.fleet.pools if pr.pool.tier.value != "reserved") == 0


def _reserved_failures(w: World) -> list[tuple[int, int]]:
    """Records (time, launch ordinal) of every failure of a reserved node from now on (wraps the node part)."""
    seen: list[tuple[int, int]] = []
    on_fail = w.node_events.on_node_fail
    f = w.fleet

    def watch(now: int, node: int, epoch: int) -> None:
        if f.n_epoch[node] == epoch and f.n_res[node] >= 0 and f.n_state[node] == 1:
            seen.append((now, f.n_ordinal[node]))
        on_fail(now, node, epoch)

    w.node_events.on_node_fail = watch  # type: ignore[method-assign]
    return seen


@pytest.mark.source_only  # patches the world's internals (tests/conftest.py)
def test_reserved_nodes_fail_at_the_same_times_under_two_node_scalers() -> None:
    """Common random numbers: the node scaler changes which nodes are launched, not when reserved ones fail."""
    sc = steady_scenario(gpus=256, days=20, seed=5)
    sc = sc.model_copy(update={"failures": sc.failures.model_copy(update={"node_mtbf_days": 20.0})})
    fails: dict[str, list[tuple[int, int]]] = {}
    for name, scaler in (("base", IdleTimeoutScaleDown()), ("gpufleet", PayoffAwareNodes.default())):
        loop = baseline_loop(sc, 5)
        loop.node_scaler = scaler
        w = World(sc, loop)
        fails[name] = _reserved_failures(w)
        w.run()
    assert fails["base"]  # the test means something: reserved nodes did fail
    assert fails["base"] == fails["gpufleet"]


def test_a_cheap_node_is_held_longer_when_the_wait_is_priced_at_on_demand() -> None:
    ns = PayoffAwareNodes(delay_weight=2.0)
    od, spot = idle(1, 0), idle(2, 0, tier="spot", price=1.25)
    assert ns.hold_s(od, 6.88) == ns.hold_s(od, 0.0) == 1_860.0  # on-demand: the wait costs its own price
    assert ns.hold_s(spot, 0.0) == 1_860.0  # no wait price known: as before
    assert ns.hold_s(spot, 6.88) == pytest.approx(600.0 + 2 * 600.0 * 6.88 / 1.25 + 60.0)  # about 2 h
    now = 3_000
    out = ns.scale_down(ctx(now, [idle(1, now), idle(2, now, tier="spot", price=1.25)], wait_price=6.88))
    assert out == [(1, "unneeded_below_threshold")]  # the on-demand node goes, the spot node stays
    assert ns.held == {"rent_or_buy_hold": 1}


def run_on(gpus: int, days: int, seed: int) -> RunningOnLaunched:
    return RunningOnLaunched(seed, gpus > 8, gpus // 8, days * 86_400, 0)


def test_the_node_scaler_moves_long_gangs_and_the_baseline_never() -> None:
    mc = MoveContext(0, "h100_80gb", [run_on(64, 3, 1), run_on(8, 3, 2), run_on(16, 0, 3)], [7_200] * 10)
    ns = PayoffAwareNodes.default()
    assert ns.moves(mc) == [(1, "long_run_to_idle_reserved")]  # not the single node, not the short run
    assert ns.held["moved_to_reserved"] == 1
    assert PayoffAwareNodes(move_to_reserved=False).moves(mc) == []
    assert IdleTimeoutScaleDown().moves(mc) == []


def _watch_moves(w: World) -> World:
    """Checks every move as the world makes it: only launched nodes are swapped, for free reserved ones."""
    cons, f, pods = w.consolidation, w.fleet, w.pods
    move = cons.move

    def checked(pod: int, launched: list[int], target: list[int], now: int) -> None:
        before = list(pods.nodes[pod])
        assert launched and all(f.n_res[n] < 0 for n in launched)
        assert len(target) == len(launched) and all(f.n_res[n] >= 0 and f.n_free[n] == 8 for n in target)
        lost = cons.moved_redo_gpu_s
        move(pod, launched, target, now)
        assert len(pods.nodes[pod]) == len(before) and all(f.n_res[n] >= 0 for n in pods.nodes[pod])
        assert cons.moved_redo_gpu_s - lost <= 900 * pods.gpus[pod]  # it moved just after a checkpoint

    cons.move = checked  # type: ignore[method-assign]
    return w


@pytest.mark.source_only  # patches the world's internals (tests/conftest.py)
@given(seed=st.integers(0, 10_000), mtbf=st.sampled_from([5.0, 250.0]))
@settings(max_examples=10, deadline=None)
def test_moves_keep_the_books_and_only_the_gpufleet_scaler_makes_them(seed: int, mtbf: float) -> None:
    sc = steady_scenario(gpus=256, days=10, seed=seed)
    sc = sc.model_copy(update={"failures": sc.failures.model_copy(update={"node_mtbf_days": mtbf})})
    loop = baseline_loop(sc, seed)
    loop.node_scaler = PayoffAwareNodes.default()
    w = _watch_moves(World(sc, loop))
    for day in range(1, sc.days + 1):
        w.run(until_s=day * 86_400 - 1)
        w.check_invariants()
    w.run()
    w.check_invariants()
    assert w.metrics.placements.get("move_long_run_to_idle_reserved", 0) == w.consolidation.moves
    base = World(sc, baseline_loop(sc, seed))
    base.run()
    assert base.consolidation.moves == 0


@pytest.mark.source_only  # patches the world's internals (tests/conftest.py)
def test_a_long_gang_on_launched_nodes_moves_to_idle_reserved_ones() -> None:
    sc = steady_scenario(gpus=256, days=10, seed=4)
    loop = baseline_loop(sc, 4)
    loop.node_scaler = PayoffAwareNodes.default()
    w = _watch_moves(World(sc, loop))
    w.run()
    w.check_invariants()
    assert w.consolidation.moves >= 1  # the planned run (64 GPUs, 14 days) started partly on on-demand nodes


@given(
    st.lists(
        st.tuples(st.integers(0, 7200), st.sampled_from([600, 900, 21_600]), st.sampled_from([0.0, 2.95, 6.88])),
        max_size=40,
    ),
    st.sampled_from([0.0, 2.95, 6.88]),
    st.booleans(),
)
def test_the_hold_memo_per_node_start_and_price_keeps_each_nodes_own_hold(
    nodes: list[tuple[int, int, float]], wait_price: float, learn: bool
) -> None:
    """scale_down's holds are computed once per (node start, price) (bench sim speed): the same keep or stop for
    every idle node as computing each node's own hold_s."""
    ns = PayoffAwareNodes.default()
    ns.learn_gaps = learn
    offered = [idle(i, t, start, price=p) for i, (t, start, p) in enumerate(nodes)]
    holds: dict[tuple[int, float], float] = {}
    memo = [ns._keep(n, wait_price, holds) for n in offered]
    plain = [ns._keep(n, wait_price, {}) for n in offered]
    assert memo == plain
    assert all(holds[(n.node_start_s, n.price_usd_per_gpu_h)] == ns.hold_s(n, wait_price) for n in offered)


def test_idle_nodes_are_held_only_as_many_as_the_fresh_nodes_needed_over_their_break_even() -> None:
    ns = PayoffAwareNodes.default()  # break-even 3,060 s on on-demand H100
    assert ns.scale_down(ctx(0, [])) == []  # the scaler starts watching the SKU
    # one fresh node needed (launched) within the last break-even, two nodes idle: the most recent one stays
    assert ns.nodes_to_launch(ScaleUpContext(3000, "h100_80gb", 1, False, 0, 0, 0, 600)) == 1
    out = ns.scale_down(ctx(4000, [idle(1, 900), idle(2, 700)]))
    assert out == [(1, "unneeded_below_threshold")]
    # nothing needed over the last break-even: an idle node goes long before its own break-even
    quiet = PayoffAwareNodes.default()
    quiet.scale_down(ctx(0, []))
    assert quiet.scale_down(ctx(4000, [idle(2, 700)])) == [(2, "unneeded_below_threshold")]
    # without the count (before session 15): both held to their break-even
    plain = PayoffAwareNodes.default()
    plain.count_needs = False
    assert plain.scale_down(ctx(4000, [idle(1, 900), idle(2, 700)])) == []


def test_a_reused_idle_node_counts_as_a_need() -> None:
    ns = PayoffAwareNodes.default()
    ns.scale_down(ctx(0, []))
    ns.scale_down(ctx(3000, [idle(1, 700), idle(9, 2000)]))  # not yet a whole break-even watched: both held
    assert ns.needs["h100_80gb"].within(3000, 3060.0) is None
    ns.scale_down(ctx(3900, [idle(9, 2900)]))  # node 1 was reused
    assert ns.needs["h100_80gb"].within(3900, 3060.0) == 1
    assert ns.scale_down(ctx(3900, [idle(9, 2900), idle(3, 700)])) == [(9, "unneeded_below_threshold")]


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 4)), max_size=300), st.sampled_from([60.0, 3060.0]))
def test_need_counts_are_the_needs_of_the_span(events: list[tuple[int, int]], span: float) -> None:
    nc = NeedCounts()
    nc.watch(0)
    t, seen = 0, []
    for dt, k in events:
        t += dt
        nc.add(t, k)
        seen.append((t, k))
        want = None if t < span else sum(k for u, k in seen if u > t - span)
        assert nc.within(t, span) == want


class _Recorded(IdleSpells):
    """Idle spells that also keep every spell added, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[float, bool]] = []

    def add(self, duration_s: float, reused: bool) -> None:
        super().add(duration_s, reused)
        self.log.append((duration_s, reused))


def _spells_as_first_written(calls: list[tuple[int, str, list[IdleNode]]]) -> dict[str, list[tuple[float, bool]]]:
    """The node scaler's watch of idle spells as first written: one dict of open spells over every SKU, scanned
    whole at each call (the reference for the per-SKU dicts)."""
    opened: dict[int, list] = {}  # node id -> [sku, pool, start, last seen]
    last: dict[str, int] = {}
    period_s: dict[str, int] = {}
    out: dict[str, list[tuple[float, bool]]] = {}
    for now, sku, nodes in calls:
        if sku in last and now > last[sku]:
            period_s[sku] = min(period_s.get(sku, now - last[sku]), now - last[sku])
        last[sku] = now
        period = period_s.get(sku, 0)
        here = {n.node_id: n for n in nodes}
        for node_id, (o_sku, pool, start, seen) in list(opened.items()):
            n = here.get(node_id)
            if o_sku != sku or (n is not None and now - n.idle_for_s == start):
                continue
            out.setdefault(pool, []).append((seen + min(now - seen, period) / 2 - start, True))
            del opened[node_id]
        for n in nodes:
            if n.node_id in opened:
                opened[n.node_id][3] = now
            else:
                opened[n.node_id] = [sku, n.pool_id, now - n.idle_for_s, now]
    return out


@pytest.mark.source_only  # patches the world's internals (tests/conftest.py)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["h100_80gb", "l40s"]), st.sets(st.integers(0, 5))), max_size=25), st.data())
def test_idle_spells_watched_per_sku_are_the_spells_watched_over_every_sku(
    looks: list[tuple[str, set[int]]], data: st.DataObject
) -> None:
    """PayoffAwareNodes keeps each SKU's open idle spells apart (a look reads only its SKU's): the spells it
    records (pool, length, reused), in order, are those of the watch over one dict of every SKU's spells."""
    ns = PayoffAwareNodes.default()
    since: dict[int, int] = {}  # node id -> idle since (kept while it stays in its SKU's idle list)
    calls: list[tuple[int, str, list[IdleNode]]] = []
    now = 0
    for sku, ids in looks:
        now += data.draw(st.integers(0, 600))
        base = 0 if sku == "h100_80gb" else 100  # node ids are unique across SKUs
        nodes = []
        for i in sorted(ids):
            node_id = base + i
            if node_id not in since or data.draw(st.booleans()):  # a new spell (or a reuse in between)
                since[node_id] = now - data.draw(st.integers(0, 300))
            pool = f"aws/us-east-1/{sku}/" + ("on_demand" if i % 2 else "spot")
            nodes.append(IdleNode(node_id, pool, sku, "on_demand", 8, now - since[node_id], 9999, 600, 6.88))
        calls.append((now, sku, nodes))
    for _now, _sku, nodes in calls:
        for n in nodes:
            ns.spells.setdefault(n.pool_id, _Recorded())
    for now, sku, nodes in calls:
        ctx_ = ScaleDownContext(now, sku, nodes, 8, 0, 640, None, 0.0, 0.0)  # work pending: only the watch runs
        assert ns.scale_down(ctx_) == []
    got = {pool: s.log for pool, s in ns.spells.items() if isinstance(s, _Recorded) and s.log}
    assert got == _spells_as_first_written(calls)
