"""A gang empties whole nodes of lower-priority work when that loses fewer GPU-hours than waiting for nodes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.control.scheduling import FleetScheduler, PodAsk
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.preemption import (
    GangPreemptionPlan,
    NoPreemption,
    PreemptRequest,
    RunningJob,
    eviction_loss_gpu_h,
    plan_gang_preemption,
)

GANG = PodAsk(1, 0, 32, 8, (0, 1, 3), 1, False)  # a 32-GPU training gang (4 whole 8-GPU nodes), priority 1
REQ = PreemptRequest("1", WorkloadKind.TRAINING, 1, 32)


def _job(pid: int, node: int, gpus: int = 4, prio: int = 0, started: int = 0, ckpt: bool = True) -> RunningJob:
    last = 0 if ckpt else None
    return RunningJob(str(pid), WorkloadKind.TRAINING, prio, node, gpus, started, last, ckpt)


def _sched(gang: bool = True) -> FleetScheduler:
    return FleetScheduler("bestfit", ["h100_80gb"], [8], np.random.default_rng(0), gang_preemption=gang)


def test_the_cheapest_nodes_are_emptied_whole() -> None:
    # nodes 0 and 1 hold checkpointed work (lose at most the 120 s grace), node 2 uncheckpointed work an hour old
    pods = {
        0: [_job(10, 0), _job(11, 0)],
        1: [_job(12, 1, gpus=8)],
        2: [_job(13, 2, gpus=8, ckpt=False)],
    }
    plan = plan_gang_preemption(REQ, 2, pods, 3600, 120)
    assert isinstance(plan, GangPreemptionPlan)
    assert set(plan.nodes) == {0, 1}
    assert {e.job_id for e in plan.evictions} == {"10", "11", "12"}  # every pod on the chosen nodes
    assert plan.lost_gpu_h == (4 + 4 + 8) * 120 / 3600


def test_a_node_with_any_protected_pod_is_not_offered_as_empty() -> None:
    pods = {
        0: [_job(10, 0), _job(11, 0, prio=1)],  # same priority as the gang: protected
        1: [_job(12, 1), RunningJob("13", WorkloadKind.SERVING, 0, 1, 4, 0)],  # serving is never a victim
    }
    got = plan_gang_preemption(REQ, 1, pods, 3600, 120)
    assert isinstance(got, NoPreemption)
    assert got.reason == "no_eligible_victims"
    assert {why for _, why in got.excluded} == {"not_lower_priority", "serving_protected"}


def test_too_few_eligible_nodes_means_no_plan() -> None:
    got = plan_gang_preemption(REQ, 3, {0: [_job(10, 0)], 1: [_job(11, 1)]}, 3600, 120)
    assert isinstance(got, NoPreemption)
    assert got.reason == "victims_insufficient"
    assert plan_gang_preemption(REQ, 0, {0: [_job(10, 0)]}, 3600, 120).reason == "fits_without_preemption"


def test_the_stage_waits_when_the_victims_lose_more_than_the_gang_idles() -> None:
    # 32 GPUs idle 600 s = 5.33 GPU-h; two whole nodes of uncheckpointed 8-GPU work 30 min old lose 8 GPU-h
    pods = {0: [_job(10, 0, gpus=8, ckpt=False)], 1: [_job(11, 1, gpus=8, ckpt=False)]}
    got = _sched().preempt_gang(GANG, 2, pods, 1800, 600)
    assert isinstance(got, NoPreemption) and got.reason == "waiting_is_cheaper"
    # checkpointed victims lose the grace period only: 16 GPUs x 120 s = 0.53 GPU-h
    ok = _sched().preempt_gang(GANG, 2, {0: [_job(10, 0, gpus=8)], 1: [_job(11, 1, gpus=8)]}, 1800, 600)
    assert isinstance(ok, GangPreemptionPlan) and ok.nodes == (0, 1)


def test_off_unless_both_switches_are_on() -> None:
    pods = {0: [_job(10, 0, gpus=8)], 1: [_job(11, 1, gpus=8)]}
    assert _sched(gang=False).preempt_gang(GANG, 2, pods, 1800, 600).reason == "preemption_disabled"
    single = PodAsk(2, 0, 8, 8, (0,), 1, False)
    assert _sched().preempt_gang(single, 0, pods, 1800, 600).reason == "not_a_gang"
    # the single-node path still refuses gangs: they go through preempt_gang
    assert _sched().preempt(GANG, [], {}, 1800, 600).reason == "gang_not_preempting"


def test_only_the_gpufleet_loop_lets_gangs_preempt() -> None:
    assert ControlLoop.gpufleet(1).gang_preemption
    assert not ControlLoop.baseline(1).gang_preemption
    assert not ControlLoop.common_practice(1).gang_preemption
    sched = ControlLoop.gpufleet(1).scheduler(["h100_80gb"], [8], 1)
    assert sched.gang_preemption and sched.preemption


node_pods = st.lists(
    st.tuples(
        st.integers(1, 8),  # GPUs
        st.integers(0, 2),  # priority
        st.integers(0, 7200),  # started
        st.booleans(),  # checkpointed
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(node_pods, min_size=0, max_size=8), st.integers(-1, 6))
def test_a_plan_empties_exactly_the_short_nodes_cheapest_first(nodes: list, short: int) -> None:
    now = 7200
    pods = {
        n: [_job(100 * n + i, n, g, p, min(s, now), c) for i, (g, p, s, c) in enumerate(ps)]
        for n, ps in enumerate(nodes)
    }
    got = plan_gang_preemption(REQ, short, pods, now, 120)
    eligible = {n: js for n, js in pods.items() if all(j.priority < 1 for j in js)}
    if short <= 0 or len(eligible) < short:
        assert isinstance(got, NoPreemption)
        return
    assert isinstance(got, GangPreemptionPlan)
    assert len(got.nodes) == short == len(set(got.nodes))
    assert all(n in eligible for n in got.nodes)
    assert {e.job_id for e in got.evictions} == {j.id for n in got.nodes for j in pods[n]}
    loss = {n: sum(eviction_loss_gpu_h(j, now, 120) for j in js) for n, js in eligible.items()}
    worst_chosen = max(loss[n] for n in got.nodes)
    assert all(loss[n] >= worst_chosen - 1e-12 for n in eligible if n not in got.nodes)
    assert abs(got.lost_gpu_h - sum(loss[n] for n in got.nodes)) < 1e-9
