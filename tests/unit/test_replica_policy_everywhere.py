"""gpufleet's replica policy is one object in every world: the simulator's loop, the service's stateless decision
(control/serving.py) and the Kubernetes controller build it with ``gpufleet_replica_policy``; over an inner policy
that scales to zero or keeps to a budget, the spare replica and the floors add nothing the inner policy refused."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.control.replicas import gpufleet_replica_policy
from gpufleet.control.serving import ReplicaBounds, decide_replicas
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaSignals

PERIOD = 900


def _signals(k: int, rps: float, ready: int, target: float) -> ReplicaSignals:
    return ReplicaSignals(float(k * PERIOD), ready, 0, float(PERIOD), rps, 0.0, 0, rps / target)


def test_the_simulators_gpufleet_loop_runs_the_policy_the_service_decides_with() -> None:
    loop_policy = ControlLoop.gpufleet(1, control_period_s=PERIOD).autoscaler
    assert isinstance(loop_policy, SpareReplicas)
    fresh = gpufleet_replica_policy(PERIOD)
    assert type(loop_policy.inner) is type(fresh.inner) and loop_policy.period_s == fresh.period_s

    # the service's decision for a series equals replaying that series through the loop's own policy object
    bounds = ReplicaBounds(2, 40, 10.0, 8.0)
    rps = [50.0 + 40.0 * math.sin(2 * math.pi * k / 96) + (30.0 if k % 96 == 10 else 0.0) for k in range(96 * 6)]
    scaling = ServingScaling(2, 40, 10.0, 210)
    loop_policy.declare_fleet(
        scaling, gpus_per_replica=1, slo_s=None, max_concurrency=None, price_usd_per_replica_h=8.0
    )
    last = None
    for k, v in enumerate(rps):
        last = loop_policy.decide(_signals(k + 1, v, 6, 10.0), scaling)
    service = decide_replicas(bounds, rps=rps, current=6, queue_depth=0, period_s=PERIOD)
    assert last is not None and (service.desired, service.reason) == (last.desired, last.reason)


def test_a_fleet_the_inner_policy_scales_to_zero_gets_no_spare() -> None:
    bounds = ReplicaBounds(0, 8, 1.0, 30.0)
    busy = decide_replicas(bounds, rps=[2.0] * 8, current=3, queue_depth=0, period_s=PERIOD)
    assert busy.desired >= 3  # two replicas' load plus the spare
    quiet = decide_replicas(bounds, rps=[2.0] * 8 + [0.0] * 200, current=2, queue_depth=0, period_s=PERIOD)
    assert (quiet.desired, quiet.reason) == (0, "scale_to_zero")


def test_the_spare_and_the_floors_never_spend_above_a_budget_the_inner_policy_kept_to() -> None:
    price_h = 10.0  # 240 USD a replica-day
    # the inner policy wants 4 replicas (960/day) within a 1,000/day budget: the spare would make 5 (1,200/day)
    bounds = ReplicaBounds(1, 20, 10.0, price_h, budget_usd_day=1000.0)
    d = decide_replicas(bounds, rps=[30.0] * 40, current=4, queue_depth=0, period_s=PERIOD)
    assert d.desired == 4 and d.reason == "budget_capped" and d.budget_bound
    assert d.spend_usd_day is not None and d.spend_usd_day <= 1000.0
    free = decide_replicas(
        ReplicaBounds(1, 20, 10.0, price_h), rps=[30.0] * 40, current=4, queue_depth=0, period_s=PERIOD
    )
    assert free.desired == 5 and not free.budget_bound  # without a budget the spare is added


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 400.0, allow_nan=False), min_size=1, max_size=60),
    lo=st.integers(0, 3),
    span=st.integers(1, 30),
    budget=st.one_of(st.none(), st.floats(50.0, 5000.0)),
    current=st.integers(0, 20),
)
def test_decisions_stay_in_bounds_and_within_budget_unless_min_replicas_forces_it(
    rates: list[float], lo: int, span: int, budget: float | None, current: int
) -> None:
    price_h = 4.0
    bounds = ReplicaBounds(lo, lo + span, 5.0, price_h, budget_usd_day=budget)
    d = decide_replicas(bounds, rps=rates, current=current, queue_depth=0, period_s=PERIOD)
    assert lo <= d.desired <= lo + span
    if budget is not None and not d.budget_exceeded and d.degrade is None:
        assert d.desired * price_h * 24 <= budget + 1e-6
    if d.budget_exceeded:
        assert d.desired == lo


def test_a_series_that_repeats_exactly_every_day_does_not_overflow_the_step_tail() -> None:
    """Identical jumps per time-of-day slot have a spread of rounding noise, which drives the newsvendor's z past
    float's normal tail (an infinite Student-t quantile): the step floor stays finite and within max_replicas."""
    rps = [20.0 + (60.0 if k % 96 == 40 else 0.0) for k in range(96 * 8)]
    d = decide_replicas(ReplicaBounds(1, 30, 10.0, 8.0), rps=rps, current=3, queue_depth=0, period_s=PERIOD)
    assert 1 <= d.desired <= 30
