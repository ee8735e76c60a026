"""The simulator's fast paths give the very decisions of the plain computations they replace (bench sim speed).

Whole runs with gangs, quotas, preemption and node failures, checked call by call: the freeing-node heap
(sim/freeing.py, its heap compacted often) against a scan of every busy node, and its memo per (time, index version) against computing
again; the scheduler's bit-set and per-rack reads (control/scheduling.FleetScheduler.place) against the candidate
tuple and the rack grouping built from the index; the queue pass's skipped pods (sim/scheduling.NoRoom) against
asking the scheduler; the preemption scans skipped at an unchanged index (sim/preempting.Preemption.try_preempt)
against scanning; the quota book's running pool use against the sum over the cohort; and the scale-down
context's free and schedulable GPUs read off the index's buckets against its per-class counts. Property tests: the
engine's dispatch loop against popping one event at a time, the fused quota check-and-hold against check then hold.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpufleet.sim.freeing as sim_freeing
import gpufleet.sim.preempting as sim_preempting
import gpufleet.sim.scheduling as sim_scheduling
from gpufleet.control.loop import ControlLoop
from gpufleet.control.scheduling import Bind, FleetScheduler, FreeGpuIndex, PodAsk, QuotaAdmission, TeamQuota, Wait
from gpufleet.schedule.gang import plan_whole_nodes
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.engine import EventQueue
from gpufleet.sim.kinds import PRIO_SERVING, RUNNING, TIERS_ALL
from gpufleet.sim.pods import Billing
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.world import World

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only


def reference_place(sched: FleetScheduler, ask: PodAsk, index: FreeGpuIndex, rack_of: Sequence[int]) -> Bind | Wait:
    """FleetScheduler.place as first written: candidate tuples and a rack grouping of the bucket's nodes."""
    s, g, per = ask.sku, ask.gpus, ask.per_node
    if g <= per:
        for t in ask.tiers:
            cands = index.fitting_classes(s, t, g, per)
            if cands:
                choice = sched.classes[s].choose(g, cands)
                return Bind((index.first_with_free(s, t, choice.free_gpus),), choice.reason)
        return Wait("no_fit")
    need = g // per
    counts = [index.free_nodes(s, t, per) for t in ask.tiers]
    if sum(counts) < need:
        return Wait("gang_no_fit")
    nodes: list[int] = []
    for t, c in zip(ask.tiers, counts, strict=True):
        take = min(c, need - len(nodes))
        if take <= 0:
            continue
        by_rack: dict[int, list[int]] = {}
        for n in index.nodes_with_free(s, t, per):
            by_rack.setdefault(rack_of[n], []).append(n)
        got = plan_whole_nodes(by_rack, take)
        assert got is not None
        nodes.extend(got[0])
    level = "rack" if len({rack_of[n] for n in nodes}) == 1 else "cluster"
    return Bind(tuple(nodes), f"gang_{level}", level)


CALLS = {"free": 0, "memo": 0, "place": 0, "quota": 0, "no_room": 0, "sums": 0, "no_victims": 0}


class CheckedNoRoom(sim_scheduling.NoRoom):
    """NoRoom that asks the scheduler about every pod it rules out (it must say wait)."""

    world: World | None = None

    def rules_out(self, ask: PodAsk) -> bool:
        out = super().rules_out(ask)
        w = CheckedNoRoom.world
        if out and w is not None:
            d = w.scheduling.sched.place(ask, w.fleet.index, w.fleet.n_rack)
            assert isinstance(d, Wait), (ask, d)
            CALLS["no_room"] += 1
        return out


def checked_world(sc: Scenario, loop: ControlLoop) -> World:
    """A world whose fast paths are checked against the plain computations on every call (wraps its parts)."""
    w = World(sc, loop)
    freeing, sch, f, pods = w.freeing, w.scheduling, w.fleet, w.pods
    expected_free_times, try_place, admit = freeing.expected_free_times, sch.try_place, sch.admit
    freeing_times = freeing.freeing_times
    CheckedNoRoom.world = w

    def free_times(s: int, now: int, within_s: int, want: int, tiers: tuple[int, ...]) -> list[int]:
        got = expected_free_times(s, now, within_s, want, tiers)
        per, limit = w.per_node[s], now + within_s
        ref: list[int] = []
        for t in tiers:  # every busy node of the SKU, every pod's reported end: no bound, no cache
            for free in range(want):
                for node in f.index.iter_with_free(s, t, free):
                    ends = []
                    for p in f.n_pods[node]:
                        if pods.serving[p] >= 0 or pods.state[p] != RUNNING:
                            break
                        left = pods.start[p] + pods.remaining[p] - now
                        eta = now + int(left * freeing.eta_mult(p)) if left > 0 else now
                        if eta > limit:
                            break
                        ends.append((eta, min(pods.gpus[p], per)))
                    else:
                        have = free
                        for eta, gpus in sorted(ends):
                            have += gpus
                            if have >= want:
                                ref.append(max(eta, now))
                                break
        assert got == sorted(ref), (now, s, want)
        CALLS["free"] += 1
        return got

    def memoised(s: int, pod: int, now: int, within_s: int) -> list[int]:
        got = freeing_times(s, pod, now, within_s)
        per, g = w.per_node[s], pods.gpus[pod]
        ref = free_times(s, now, within_s, per if g >= per else g, pods.tiers(pod))  # computed again, no memo
        taken = sum(k for p, k in freeing.claims[s].items() if p != pod)
        assert got == ref[taken:], (now, s, pod)
        CALLS["memo"] += 1
        return got

    def place(pod: int, now: int) -> bool:
        ask = sch.ask(pod)
        fast = sch.sched.place(ask, f.index, f.n_rack)
        ref = reference_place(sch.sched, ask, f.index, f.n_rack)
        assert fast == ref, (pod, fast, ref)
        CALLS["place"] += 1
        return try_place(pod, now)

    def quota(pod: int, now: int) -> bool:
        out = admit(pod, now)
        book = sch.admission.book
        for cohort, flavor in {(q.cohort, q.flavor) for q in book.quotas.values()}:
            assert book.pool_used(cohort, flavor) == sum(book.pool_use(m) for m in book.members(cohort, flavor))
        CALLS["quota"] += 1
        return out

    try_preempt = sch.preemption.try_preempt

    def preempt(pod: int, now: int) -> bool:
        s, g = pods.sku[pod], pods.gpus[pod]
        prio = PRIO_SERVING if pods.serving[pod] >= 0 else pods.prio[pod]
        if sch.preemption.scan_skipped(sch.ask(pod)):  # the memo skips the scan
            per, offered = w.per_node[s], 0
            for t in pods.tiers(pod):  # the scan as written: the first PREEMPT_SCAN_NODES busy nodes
                for free in range(g - 1, -1, -1):
                    for node in f.index.iter_with_free(s, t, free):
                        if offered < sim_preempting.PREEMPT_SCAN_NODES:
                            offered += 1
                            assert not [p for p in f.n_pods[node] if pods.gpus[p] <= per and pods.prio[p] < prio]
            CALLS["no_victims"] += 1
        return try_preempt(pod, now)

    prov = w.provisioner
    free_gpus, capacity_gpus = prov.free_gpus, prov.capacity_gpus

    def free_plain(s: int, tiers: tuple[int, ...] = TIERS_ALL) -> int:
        got = free_gpus(s, tiers)
        per = w.per_node[s]
        assert got == sum(k * f.index.free_nodes(s, t, k) for t in tiers for k in range(1, per + 1))
        CALLS["sums"] += 1
        return got

    def capacity_plain(s: int) -> int:
        got = capacity_gpus(s)
        per = w.per_node[s]
        assert got == per * sum(f.index.free_nodes(s, t, k) for t in range(f.index.n_tiers) for k in range(per + 1))
        return got

    prov.free_gpus = free_plain  # type: ignore[method-assign]
    prov.capacity_gpus = capacity_plain  # type: ignore[method-assign]
    freeing.expected_free_times = free_times  # type: ignore[method-assign]
    freeing.freeing_times = memoised  # type: ignore[method-assign]
    sch.try_place = place  # type: ignore[method-assign]
    sch.admit = quota  # type: ignore[method-assign]
    sch.preemption.try_preempt = preempt  # type: ignore[method-assign]
    return w


@pytest.mark.parametrize(
    ("seed", "policy", "mtbf"), [(3, "gpufleet", 250.0), (11, "bestfit", 3.0), (5, "packing", 30.0)]
)
def test_fast_paths_decide_as_the_plain_computations(
    seed: int, policy: str, mtbf: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = default_scenario(gpus=512, days=6, seed=seed)
    sc = sc.model_copy(
        update={
            "failures": sc.failures.model_copy(update={"node_mtbf_days": mtbf}),
            "control": sc.control.model_copy(update={"scheduler_policy": policy, "eta_error_sd": 0.2}),
        }
    )
    CALLS.update(free=0, memo=0, place=0, quota=0, no_room=0, sums=0, no_victims=0)
    monkeypatch.setattr(sim_scheduling, "NoRoom", CheckedNoRoom)
    monkeypatch.setattr(sim_freeing, "COMPACT_SLACK", 8)  # compact the bound heaps often (checked by the scan)
    w = checked_world(sc, gpufleet_loop(sc, seed))
    w.run()
    assert sum(st.compactions for st in w.freeing._bounds.values()) > 10
    w.check_invariants()
    assert CALLS["free"] > 20 and CALLS["place"] > 500 and CALLS["quota"] > 100
    assert CALLS["memo"] > CALLS["free"] // 2 and CALLS["no_room"] > 20 and CALLS["sums"] > 20
    assert any(r.startswith("gang_") for r in w.scheduling.sched_reasons)
    assert CALLS["no_victims"] > 100


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9), st.integers(0, 3)), min_size=1, max_size=30),
    st.lists(st.integers(0, 40), max_size=20),
    st.integers(0, 120),
)
def test_dispatch_runs_the_events_pop_until_would(
    seeds: list[tuple[int, int, int]], stream: list[int], stop: int
) -> None:
    """EventQueue.dispatch (the run's loop) handles the same events in the same order as pop_until one by one,
    with handlers that schedule more events and a pre-sorted stream merged in."""

    def run(use_dispatch: bool) -> tuple[list[tuple[int, int, int, int]], int, int]:
        q = EventQueue()
        seen: list[tuple[int, int, int, int]] = []

        def handler(kind: int) -> object:
            def h(t: int, a: int, b: int) -> None:
                seen.append((t, kind, a, b))
                if kind < 3 and len(seen) < 200:
                    q.schedule(t + (a % 7), kind + 1, a + 1, priority=(a * 3) % 5)

            return h

        handlers = [handler(k) for k in range(5)]
        q.add_stream(sorted(stream), 4, priority=2)
        for t, a, kind in seeds:
            q.schedule(t, kind, a, priority=a % 4)
        if use_dispatch:
            q.dispatch(stop, handlers)  # type: ignore[arg-type]
        else:
            while (ev := q.pop_until(stop)) is not None:
                handlers[ev[3]](ev[0], ev[4], ev[5])  # type: ignore[operator]
        return seen, q.processed, q.now_s

    assert run(True) == run(False)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 24), st.booleans()), min_size=1, max_size=60))
def test_check_and_hold_is_check_then_hold(ops: list[tuple[int, int, bool]]) -> None:
    """QuotaAdmission.check_and_hold (one call on the hot path) decides and records as check, then hold on admit."""
    quotas = [
        TeamQuota("a", "c", "h100", 16, borrowing_limit_gpus=8),
        TeamQuota("b", "c", "h100", 8, lending_limit_gpus=4),
        TeamQuota("d", "c", "h100", 12),
        TeamQuota("e", "x", "h100", 4, borrowing_limit_gpus=0),
    ]
    fused, plain = QuotaAdmission(quotas), QuotaAdmission(quotas)
    teams = ["a", "b", "d", "e"]
    for pod, (t, g, release) in enumerate(ops):
        if release and fused.held:
            victim = next(iter(fused.held))
            assert fused.release(victim) and plain.release(victim)
            continue
        got = fused.check_and_hold(pod, teams[t], "h100", g)
        want = plain.check(teams[t], "h100", g)
        if want.decision == "admit":
            plain.hold(pod, want)
        assert got == want
        assert fused.held == plain.held and fused.book.usage == plain.book.usage


def _ledger_books(w: World) -> tuple[object, ...]:
    led = w.ledger
    return (
        list(led.by_team.items()),  # the order of first charge too, not only the sums
        list(led.by_tenant.items()),
        list(led.by_tier.items()),
        list(led.by_workload.items()),
        led.allocated_units,
    )


def _charge_each_segment(billing: Billing, pod: int, now: int) -> None:
    """``Billing.charge`` as first written: each segment straight to the ledger (the reference the summed charges
    are compared with)."""
    p = billing.pods
    dt = now - p.seg[pod]
    if dt <= 0:
        return
    p.seg[pod] = now
    g = p.gpus[pod]
    per = billing.per_node[p.sku[pod]]
    gpn = g if g <= per else per
    fl = p.serving[pod]
    if fl >= 0:
        team, tenant, group = billing.serving_owner[fl]
    else:
        team = p.team[pod]
        tenant, group = p.tenant_of_team[team], p.group[pod]
    pools, n_pool = billing.fleet.pools, billing.fleet.n_pool
    for node in p.nodes[pod]:
        pr = pools[n_pool[node]]
        billing._ledger.charge(
            team=team, tenant=tenant, workload=group, tier=pr.tier_name, price_uusd=pr.price_uusd, gpus=gpn, seconds=dt
        )


@pytest.mark.parametrize(("seed", "mtbf"), [(3, 250.0), (5, 20.0)])
def test_summed_billing_books_as_charging_every_segment(seed: int, mtbf: float) -> None:
    """Billing sums the segments per (owner, pool) and writes them when the ledger is read: the ledger (every
    total, every key's order) equals charging each segment as it closes (the code as first written), read mid-run and at
    the end, with failures, gangs on several pools, moves and serving replicas."""
    sc = default_scenario(gpus=512, days=5, seed=seed)
    sc = sc.model_copy(update={"failures": sc.failures.model_copy(update={"node_mtbf_days": mtbf})})
    summed, plain = World(sc, gpufleet_loop(sc, seed)), World(sc, gpufleet_loop(sc, seed))
    plain.billing.charge = functools.partial(_charge_each_segment, plain.billing)  # type: ignore[method-assign]
    thresholds = gc.get_threshold()
    for w in (summed, plain):
        w.run(until_s=2 * 86_400 + 1234)
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0  # the run restores the collector
    assert plain.billing._gpu_s == {}
    assert summed.billing._gpu_s  # segments summed, not yet written
    assert _ledger_books(summed) == _ledger_books(plain)
    for w in (summed, plain):
        w.run()
    assert _ledger_books(summed) == _ledger_books(plain)
    assert summed.q.processed == plain.q.processed


def test_a_callers_gc_freeze_survives_a_run() -> None:
    """The run freezes the collector's objects only when nothing is frozen yet, and undoes only its own freeze."""
    sc = default_scenario(gpus=512, days=1, seed=3)
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        World(sc, gpufleet_loop(sc, 3)).run()
        # still frozen (a frozen object the run let go of leaves the count, so it may shrink a little)
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
