"""The simulator's fast paths give the very decisions of the plain computations they replace (bench sim speed).

Whole runs with gangs, quotas, preemption and node failures, checked call by call: the freeing-node heap
(sim/freeing.py) against a scan of every busy node, the scheduler's bit-set and per-rack reads
(control/scheduling.FleetScheduler.place) against the candidate tuple and the rack grouping built from the index,
and the quota book's running pool use against the sum over the cohort.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.control.loop import ControlLoop
from gpufleet.control.scheduling import Bind, FleetScheduler, FreeGpuIndex, PodAsk, Wait
from gpufleet.schedule.gang import plan_whole_nodes
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.kinds import RUNNING
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.world import World


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


CALLS = {"free": 0, "place": 0, "quota": 0}


def checked_world(sc: Scenario, loop: ControlLoop) -> World:
    """A world whose fast paths are checked against the plain computations on every call (wraps its parts)."""
    w = World(sc, loop)
    freeing, sch, f, pods = w.freeing, w.scheduling, w.fleet, w.pods
    expected_free_times, try_place, admit = freeing.expected_free_times, sch.try_place, sch.admit

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

    freeing.expected_free_times = free_times  # type: ignore[method-assign]
    sch.try_place = place  # type: ignore[method-assign]
    sch.admit = quota  # type: ignore[method-assign]
    return w


@pytest.mark.parametrize(
    ("seed", "policy", "mtbf"), [(3, "gpufleet", 250.0), (11, "bestfit", 3.0), (5, "packing", 30.0)]
)
def test_fast_paths_decide_as_the_plain_computations(seed: int, policy: str, mtbf: float) -> None:
    sc = default_scenario(gpus=512, days=6, seed=seed)
    sc = sc.model_copy(
        update={
            "failures": sc.failures.model_copy(update={"node_mtbf_days": mtbf}),
            "control": sc.control.model_copy(update={"scheduler_policy": policy, "eta_error_sd": 0.2}),
        }
    )
    CALLS.update(free=0, place=0, quota=0)
    w = checked_world(sc, gpufleet_loop(sc, seed))
    w.run()
    w.check_invariants()
    assert CALLS["free"] > 20 and CALLS["place"] > 500 and CALLS["quota"] > 100
    assert any(r.startswith("gang_") for r in w.scheduling.sched_reasons)
