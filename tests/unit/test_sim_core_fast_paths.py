"""The scheduling core's fast paths of session 13 give the very decisions of the plain computations (bench sim speed).

Each is checked against the code it replaced, kept here as the reference: a failed preemption plan answered again
from its first answer at the same (time, index version) (sim/preempting.Preemption.try_preempt) against scanning and
planning again, over whole runs; the ETA factor drawn from the run's mixed key prefix (sim/freeing.py) against
``keyed_uniform``; the quota book's check that records an admit in the same pass against check then add_usage; the
scheduler's observe of an arrival against the class scheduler's; a gang's nodes over the fewest racks read off the
index's racks by count against plan_whole_nodes (Hypothesis).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpufleet.sim.preempting as sim_preempting
from gpufleet.control.scheduling import FleetScheduler, FreeGpuIndex, PodAsk, RunningJob, TeamQuota
from gpufleet.schedule.gang import plan_whole_nodes
from gpufleet.schedule.quota import QuotaBook
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.crn import keyed_uniform
from gpufleet.sim.freeing import ETA, FreeingEstimates
from gpufleet.sim.kinds import PRIO_SERVING
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.world import World

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only


# ---------------------------------------------------------------- preemption: a failed plan is not asked again
def plain_plan(w: World, pod: int, now: int) -> object:
    """The scan and the plan of ``Preemption.try_preempt`` as written before the memo of failed plans (a copy that
    changes nothing: the running jobs are built afresh, not read from the scheduling part's memo)."""
    sch, p, f = w.scheduling, w.pods, w.fleet
    s, g = p.sku[pod], p.gpus[pod]
    per = w.per_node[s]
    prio = PRIO_SERVING if p.serving[pod] >= 0 else p.prio[pod]
    running: list[RunningJob] = []
    free_by_node: dict[int, int] = {}
    offered = 0
    for t in p.tiers(pod):
        for free in range(g - 1, -1, -1):
            for node in f.index.iter_with_free(s, t, free):
                if offered >= sim_preempting.PREEMPT_SCAN_NODES:
                    break
                offered += 1
                free_by_node[node] = free
                for q in f.n_pods[node]:
                    if p.gpus[q] <= per and p.prio[q] < prio:
                        ckpt, start = p.ckpt[q], p.start[q]
                        serving = p.serving[q] >= 0
                        running.append(
                            RunningJob(
                                str(q),
                                sch.preemption.running_job(q, node, now).kind,
                                PRIO_SERVING if serving else p.prio[q],
                                node,
                                p.gpus[q],
                                start,
                                start + (now - start) // ckpt * ckpt if ckpt > 0 else None,
                                ckpt > 0,
                            )
                        )
    assert running  # the memo of failed plans is asked only after a scan that offered victims
    wait_s = w.pool_specs[s].node_start_s
    missed = sch.preemption.missed_while_waiting(pod, wait_s)
    return sch.sched.preempt(sch.ask(pod), running, free_by_node, now, wait_s, missed)


def test_a_failed_plan_answered_again_is_the_plan_asked_again() -> None:
    """Every preemption attempt that the memo answers (the same ask at the same time and index version as a failed
    plan) gets the answer planning again gives: no plan, with the same reason (counted again); over whole runs
    with serving batches, failures and quotas, the runs' decisions unchanged by checking."""
    sc = default_scenario(gpus=512, days=8, seed=3)
    sc = sc.model_copy(update={"failures": sc.failures.model_copy(update={"node_mtbf_days": 20.0})})
    w = World(sc, gpufleet_loop(sc, 3))
    sch = w.scheduling
    pre = sch.preemption
    try_preempt = pre.try_preempt
    answered = 0

    def checked(pod: int, now: int) -> bool:
        nonlocal answered
        ask = sch.ask(pod)
        why = None if pre.scan_skipped(ask) else pre.known_failure(ask, now)
        if why is not None:
            plan = plain_plan(w, pod, now)
            assert not hasattr(plan, "evictions"), (pod, now, plan)
            assert f"preempt_{plan.reason}" == why  # type: ignore[attr-defined]
            answered += 1
        before = dict(sch.sched_reasons)
        out = try_preempt(pod, now)
        if why is not None:
            assert not out
            changed = {k: v - before.get(k, 0) for k, v in sch.sched_reasons.items() if v != before.get(k, 0)}
            assert changed == {why: 1}  # the same reason counted once more
        return out

    pre.try_preempt = checked  # type: ignore[method-assign]
    w.run()
    w.check_invariants()
    assert answered > 20, answered  # 77 with session 12's loop, 48 with the cost-aware replica scale-down
    assert sch.preemptions > 0  # plans that evict still run (the memo holds failures only)


# ---------------------------------------------------------------- the ETA factor's draw
@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, (1 << 64) - 1),
    st.integers(0, 5_000_000),
    st.integers(0, 1_000),
    st.sampled_from([0.0, 0.05, 0.2, 0.5, 3.0]),
)
def test_the_eta_factor_is_the_keyed_draw(seed: int, pod: int, epoch: int, sd: float) -> None:
    """FreeingEstimates.eta_mult (the run's key prefix mixed once, the last two mixes inlined) is
    ``max(0.1, 1 + sd * z(keyed_uniform(seed, ETA, pod, epoch)))`` to the bit, as first written."""

    class Pods:
        def __init__(self) -> None:
            self.epoch = {pod: epoch}

    fe = FreeingEstimates(Pods(), None, [8], seed, sd)  # type: ignore[arg-type]
    want = 1.0 if sd <= 0 else max(0.1, 1.0 + sd * NormalDist().inv_cdf(keyed_uniform(seed, ETA, pod, epoch)))
    assert fe.eta_mult(pod) == want
    assert fe.eta_memo[pod] == (epoch, want)


# ---------------------------------------------------------------- quota: check and record in one pass
QUOTAS = [
    TeamQuota("a", "c", "h100", 16, borrowing_limit_gpus=8),
    TeamQuota("b", "c", "h100", 8, lending_limit_gpus=4),
    TeamQuota("d", "c", "h100", 12),
    TeamQuota("e", "x", "h100", 4, borrowing_limit_gpus=0),
]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 24), st.booleans()), min_size=1, max_size=80))
def test_check_with_record_is_check_then_add_usage(ops: list[tuple[int, int, bool]]) -> None:
    """QuotaBook.check(record=True) decides as check() and records an admit as add_usage() does: the same
    decisions, usage and cohort pool use (the running sum against the sum over the cohort) after every step."""
    fused, plain = QuotaBook(), QuotaBook()
    for q in QUOTAS:
        fused.add(q)
        plain.add(q)
    teams = ["a", "b", "d", "e"]
    held: list[tuple[str, int]] = []
    for t, g, release in ops:
        if release and held:
            team, gpus = held.pop(0)
            fused.release(team, "h100", gpus)
            plain.release(team, "h100", gpus)
            continue
        got = fused.check(teams[t], "h100", g, record=True)
        want = plain.check(teams[t], "h100", g)
        if want.decision == "admit":
            plain.add_usage((teams[t], "h100"), g)
            held.append((teams[t], g))
        assert got == want
        assert fused.usage == plain.usage
        for cohort in ("c", "x"):
            assert fused.pool_used(cohort, "h100") == plain.pool_used(cohort, "h100")
            assert fused.pool_used(cohort, "h100") == sum(fused.pool_use(m) for m in fused.members(cohort, "h100"))


# ---------------------------------------------------------------- the scheduler's observe of an arrival
@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 16), min_size=1, max_size=300))
def test_observe_teaches_the_policy_as_the_class_scheduler_does(sizes: list[int]) -> None:
    """FleetScheduler.observe (the policy's observe and the classes' requests read off per SKU) leaves the policy
    as ClassScheduler.observe does for every single-node arrival (and gangs are not observed): the same learned
    counts, the same model epoch, the same choices after."""
    fast = FleetScheduler("gpufleet", ["h100"], [8], np.random.default_rng(1))
    plain = FleetScheduler("gpufleet", ["h100"], [8], np.random.default_rng(1))
    for pod, g in enumerate(sizes):
        ask = PodAsk(pod, 0, g, 8, (0, 1), 1, False)
        fast.observe(ask)
        if g < 8:
            plain.classes[0].observe(g)
    pf, pp = fast.classes[0].policy, plain.classes[0].policy
    assert pf._counts == pp._counts  # type: ignore[attr-defined]
    assert pf.model_epoch == pp.model_epoch  # type: ignore[attr-defined]
    for g in range(1, 9):
        for bits in (0b111111111, 0b100000000, 0b100110000, 0b011111110):
            fit = bits >> g << g
            if fit:
                assert fast.classes[0].choose_bits(g, fit) == plain.classes[0].choose_bits(g, fit)


# ---------------------------------------------------------------- gangs spread over the fewest racks
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 39), st.sampled_from([0, 3, 7, 8, 8, 8]), st.integers(0, 1)), min_size=1, max_size=200
    ),
    st.integers(1, 16),
)
def test_fewest_racks_is_plan_whole_nodes_cluster_answer(ops: list[tuple[int, int, int]], need: int) -> None:
    """FreeGpuIndex.fewest_racks (racks read off their counts) is plan_whole_nodes' answer over the index's whole
    free nodes by rack when no one rack holds the gang (and None when the tier holds too few), after any history
    of nodes entering and leaving the whole bucket in any order."""
    rack_of = [n // 4 + 1000 * (n % 3) for n in range(40)]  # racks of up to 4 nodes, ids not in node order
    index = FreeGpuIndex(1, 2, 8)
    index.track_racks(rack_of, [8])
    free: dict[int, tuple[int, int]] = {}  # node -> (tier, free GPUs)
    for node, g, tier in ops:
        if node in free:
            t, old = free.pop(node)
            if g == old or t != tier:
                index.remove(node, 0, t, old)
                continue
            index.move(node, 0, t, old, g)
            free[node] = (t, g)
        else:
            index.add(node, 0, tier, g)
            free[node] = (tier, g)
    for t in (0, 1):
        by_rack = index.whole_by_rack(0, t)
        plan = plan_whole_nodes(by_rack, need)
        got = index.fewest_racks(0, t, need)
        if plan is None:
            assert got is None
        elif plan[1] == "cluster":
            assert got == plan[0]
        else:  # one rack holds it: the caller takes best_whole_rack's rack, never fewest_racks
            assert index.best_whole_rack(0, t, need) is not None
