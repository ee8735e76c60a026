"""The preemption gate of a serving replica: waiting costs its idle GPUs and the requests its fleet misses."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.control.scheduling import FleetScheduler, PodAsk
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.preemption import PreemptionPlan, RunningJob

H100_USD_H = 6.88
REPLICA = PodAsk(1, 0, 4, 8, (0,), 3, True)  # a 4-GPU serving replica on 8-GPU nodes


def _sched(breach: float = 0.01) -> FleetScheduler:
    return FleetScheduler(
        "bestfit", ["h100_80gb"], [8], np.random.default_rng(0), breach_cost_usd=breach, gpu_usd_h=[H100_USD_H]
    )


def _victim() -> RunningJob:
    """An 8-GPU training job without checkpoints started at 0: evicted at t it loses 8 t / 3600 GPU-hours."""
    return RunningJob("7", WorkloadKind.TRAINING, 0, 0, 8, 0, None, False)


def test_without_missed_requests_the_gate_weighs_idle_gpus_only() -> None:
    # 30 min of an 8-GPU job (4 GPU-h) against a 4-GPU replica idle 600 s (0.67 GPU-h): wait
    got = _sched().preempt(REPLICA, [_victim()], {0: 0}, 1800, 600)
    assert got.reason == "waiting_is_cheaper"


def test_a_fleet_missing_requests_makes_the_same_eviction_worth_it() -> None:
    # 3,600 requests missed at $0.01 = $36 = 5.2 H100 GPU-hours on top of the idle 0.67: evict the 4 GPU-h job
    got = _sched().preempt(REPLICA, [_victim()], {0: 0}, 1800, 600, missed_requests=3600)
    assert isinstance(got, PreemptionPlan)
    assert got.lost_gpu_h == 4.0
    # but not a job that would lose more than the wait costs (2 h of 8 GPUs = 16 GPU-h > 5.9)
    assert _sched().preempt(REPLICA, [_victim()], {0: 0}, 7200, 600, missed_requests=3600).reason == (
        "waiting_is_cheaper"
    )


def test_no_breach_price_means_missed_requests_are_not_counted() -> None:
    got = _sched(breach=0.0).preempt(REPLICA, [_victim()], {0: 0}, 1800, 600, missed_requests=3600)
    assert got.reason == "waiting_is_cheaper"
    assert _sched(breach=0.0).waiting_miss_gpu_h(0, 3600) == 0.0
    assert abs(_sched().waiting_miss_gpu_h(0, 3600) - 36 / H100_USD_H) < 1e-12
    assert _sched().waiting_miss_gpu_h(5, 3600) == 0.0  # a SKU without a price


def test_only_the_gpufleet_loop_prices_missed_requests() -> None:
    assert ControlLoop.gpufleet(0).serving_breach_cost_usd == 0.01
    assert ControlLoop.baseline(0).serving_breach_cost_usd == 0.0
    sched = ControlLoop.gpufleet(0).scheduler(["h100_80gb", "l40s"], [8, 8], 0)
    assert sched.breach_cost_usd == 0.01
    assert sched.gpu_usd_h[0] == H100_USD_H


@given(
    age_s=st.integers(0, 6 * 3600),
    missed=st.floats(0, 1e6, allow_nan=False),
    more=st.floats(0, 1e6, allow_nan=False),
)
def test_more_missed_requests_never_turn_an_eviction_into_waiting(age_s: int, missed: float, more: float) -> None:
    s = _sched()
    a = s.preempt(REPLICA, [_victim()], {0: 0}, age_s, 600, missed_requests=missed)
    b = s.preempt(REPLICA, [_victim()], {0: 0}, age_s, 600, missed_requests=missed + more)
    if isinstance(a, PreemptionPlan):
        assert isinstance(b, PreemptionPlan)
        assert b.lost_gpu_h == a.lost_gpu_h
    # the gate never evicts more than the wait is worth
    if isinstance(b, PreemptionPlan):
        assert b.lost_gpu_h <= 4 * 600 / 3600 + (missed + more) * 0.01 / H100_USD_H + 1e-9
