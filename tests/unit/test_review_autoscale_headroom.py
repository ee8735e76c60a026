"""Review (autoscale): the spare-replica wrapper (control/serving_headroom.py ``SpareReplicas``) and the replica
decision the service serves (control/serving.py ``decide_replicas``) on edge-case input."""

from __future__ import annotations

import math
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.erlang import MAX_SERVERS, servers_for
from gpufleet.control.replicas import gpufleet_replica_policy
from gpufleet.control.serving import ReplicaBounds, decide_replicas
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals
from tests.unit.test_serving_headroom import PERIOD, Follows


def test_the_inner_policy_sees_the_fleet_without_the_whole_spare_of_small_replicas() -> None:
    """Review (fixed), the defect: ``SpareReplicas._without_spare`` took ``spare`` off the fleet the inner policy
    sees, not the fleet's spare (``_spare``), though ``decide`` adds the latter back. With
    ``spare_gpus`` the spare of a fleet of 1-GPU replicas is 4 replicas (``_spare``), but ``_without_spare`` took
    only ``spare`` (1) off: the inner policy counted three spare replicas as its own (its queue drain, its
    stabilization and its zero rule read them)."""
    inner = Follows()
    fleet = ServingScaling(min_replicas=1, max_replicas=200, target_rps_per_replica=10.0)
    sp = SpareReplicas(inner, PERIOD, spare=1, spare_gpus=4, step_days=0)
    sp.declare_fleet(fleet, gpus_per_replica=1, slo_s=None, max_concurrency=None)
    d = sp.decide(ReplicaSignals(0.0, 10, 2, PERIOD, 60.0, 6.0, 0, 6.0), fleet)
    assert (inner.seen[0].ready, inner.seen[0].starting) == (8, 0)  # 4 off: the 2 starting first, then 2 ready
    assert d.desired == 6 + 4


def test_the_fast_path_keeps_the_spare_within_the_budget() -> None:
    """Review (fixed), the defect: ``SpareReplicas.react`` added the spare over the fleet's budget.
    It added the spare to the inner policy's budgeted reaction without pricing it: 6 replicas at $240 a
    day each on a $1,200 budget (the decision even said ``spend_usd_day`` 1,200, the price of 5), and 3 on a $700
    budget whose inner decision was capped at 2 (``budget_bound``). ``decide`` keeps the spare and the floors
    within the budget, and adds nothing when the budget binds (docs/autoscale.md)."""
    got = {}
    for budget in (1200.0, 700.0):
        fleet = ServingScaling(1, 100, 10.0, budget_usd_day=budget)
        p = gpufleet_replica_policy(PERIOD)
        p.declare_fleet(fleet, gpus_per_replica=1, slo_s=None, max_concurrency=None, price_usd_per_replica_h=10.0)
        got[budget] = p.react(ReplicaSignals(100.0, 2, 0, 45.0, 40.0, 4.0, 10, 4.0), fleet)
    d = got[1200.0]
    assert d is not None and d.desired == 5 and d.budget_bound and d.reason == "budget_capped", d
    assert d.spend_usd_day == pytest.approx(d.desired * 240.0)
    assert got[700.0] is None  # the 2 replicas running are what $700 a day pays for


RATES = st.sampled_from([5e-324, 1e-300, 1e-6, 0.5, 3.0, 10.0, 250.0, 1e6, 1e9])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    day=st.lists(RATES, min_size=24, max_size=24),
    days=st.integers(5, 7),
    target=st.sampled_from([1e-9, 0.04, 10.0, 1e12]),
    lo=st.integers(0, 3),
    span=st.integers(0, 20),
)
def test_any_hourly_rates_the_api_accepts_give_a_decision_within_min_and_max(
    day: list[float], days: int, target: float, lo: int, span: int
) -> None:
    """Review (fixed), the defect: ``SpareReplicas._step_floor`` overflowed (OverflowError, ValueError on NaN) on a
    jump ratio of the rate past float range.
    ``GET .../autoscaling/decision`` accepts rates in [0, 1e9] and a stored ``target_rps`` in (0, 1e12]; the
    decision must be a count in [min, max] (module docstring of control/serving.py), never a 500. Days of one
    hourly pattern (every slot of the step pre-warm filled): a rate that jumps from 1e-300 to 1e6 made the step
    pre-warm's jump overflow (``math.ceil(inf)``: OverflowError)."""
    hi = max(1, lo + span)
    bounds = ReplicaBounds(lo, hi, target, 27.52)
    d = decide_replicas(bounds, rps=day * days, current=lo, queue_depth=0, period_s=3600)
    assert lo <= d.desired <= hi


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_rate_jump_from_nearly_nothing_at_a_recurring_slot_is_a_decision_not_an_overflow() -> None:
    """Review (fixed), the defect: ``SpareReplicas._step_floor`` raised OverflowError on an infinite jump ratio.
    Six days of hourly rates whose hour 1 jumps from 1e-300 (hour 0) to 1e9: the slot's jump ratio is inf, the
    step pre-warm returned ``math.ceil(load x inf)``."""
    rps = [1e9 if h == 1 else (1e-300 if h == 0 else 10.0) for _ in range(6) for h in range(24)]
    d = decide_replicas(ReplicaBounds(1, 10, 10.0, 27.52), rps=rps, current=1, queue_depth=0, period_s=3600)
    assert 1 <= d.desired <= 10


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_noise_floor_of_a_wild_series_is_a_count_not_an_overflow() -> None:
    """Review (fixed), the defect: ``SpareReplicas._noise_floor`` raised OverflowError in ``math.exp``.
    The noise floor alone (step pre-warm off): a series alternating 1e-300 and 1e9 rps has a log spread of
    hundreds; with a cheap replica's newsvendor z, ``math.exp(m + z sigma)`` raised OverflowError."""
    fleet = ServingScaling(1, 10, 1e12)
    sp = SpareReplicas(gpufleet_replica_policy(3600.0).inner, 3600.0, step_days=0)
    sp.declare_fleet(fleet, gpus_per_replica=1, slo_s=None, max_concurrency=None, price_usd_per_replica_h=27.52)
    for i in range(300):
        rps = 1e9 if i % 2 else 1e-300
        d = sp.decide(ReplicaSignals(i * 3600.0, 1, 0, 3600.0, rps, 0.0, 0, rps / 1e12), fleet)
        assert 1 <= d.desired <= 10


def test_erlang_staffing_answers_at_once_when_the_load_is_past_its_limit() -> None:
    """Review (fixed), the defect: ``erlang.servers_for`` walked 100,000 steps for a load no staffing can serve.
    ``servers_for`` walks the Erlang B recursion from 1 up to the answer: for a load past ``MAX_SERVERS`` (no
    answer below it) it walked all 100,000 steps to return ``MAX_SERVERS``, per decision period and twice per
    period, so a viewer's ``GET .../autoscaling/decision`` of 1,440 rates of 1e9 rps on a one-request-per-replica
    workload with an SLO held a server worker for over a minute. Now a load past the limit (``MAX_SERVERS``, or what
    the fleet's ``max_replicas`` can hold) answers at once."""
    bounds = ReplicaBounds(0, 20, 1.0, 27.52, slo_s=2.0, max_concurrency=1)
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        d = decide_replicas(bounds, rps=[1e9] * 1440, current=1, queue_depth=0, period_s=60)
    took = time.process_time() - t0
    assert d.desired == 20
    assert took < 5.0, f"{took:.1f} s of CPU for one decision"
    assert servers_for(1e9, 2.0, 1.0, 0.005) == MAX_SERVERS
    assert servers_for(50.0, 2.0, 1.0, 0.005, limit=20) == 20  # more than the limit needs: the limit
    assert servers_for(5.0, 2.0, 1.0, 0.005, limit=20) == servers_for(5.0, 2.0, 1.0, 0.005) < 20


def test_spare_wrapper_bounds_on_hand_computed_examples() -> None:
    """Hand-computed branches of ``SpareReplicas.decide`` (no defect: kept as the arithmetic the fixes above must
    not move): the spare on top, capped at max; a scale to zero stands; a binding budget stands."""
    fleet = ServingScaling(min_replicas=0, max_replicas=12, target_rps_per_replica=10.0)
    sp = SpareReplicas(Follows(), PERIOD, spare=2, step_days=0)
    assert sp.decide(ReplicaSignals(0.0, 0, 0, PERIOD, 50.0, 0.0, 0, 5.0), fleet).desired == 5 + 2
    assert sp.decide(ReplicaSignals(PERIOD, 7, 0, PERIOD, 115.0, 0.0, 0, 11.5), fleet).desired == 12  # 12 + 2 > 12

    class Zero(Follows):
        def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
            return ReplicaDecision(0, "scale_to_zero")

    assert SpareReplicas(Zero(), PERIOD, step_days=0).decide(
        ReplicaSignals(0.0, 1, 0, PERIOD, 0.0, 0.0, 0, 0.0), fleet
    ) == ReplicaDecision(0, "scale_to_zero")
    budgeted = ServingScaling(1, 12, 10.0, budget_usd_day=480.0)
    p = gpufleet_replica_policy(PERIOD)
    p.declare_fleet(budgeted, gpus_per_replica=1, slo_s=None, max_concurrency=None, price_usd_per_replica_h=10.0)
    d = p.decide(ReplicaSignals(0.0, 1, 0, PERIOD, 100.0, 10.0, 0, 10.0), budgeted)
    assert d.desired == 2 and d.budget_bound and d.reason == "budget_capped"  # 480 / 240: no spare on top
    assert math.isclose(d.spend_usd_day or 0.0, 480.0)


def test_a_tiny_stored_target_rps_gives_a_decision_not_an_overflow() -> None:
    """Review (fixed, session 43: the sizing is bounded before it is rounded), the defect: a stored ``target_rps``
    of 1e-300 (``NonNegFloat`` accepts it) and one rate of 1e9: the load is inf replicas and ``math.ceil(raw)`` in
    ``PredictiveReplicaAutoscaler.decide`` raised OverflowError (a 500 over HTTP)."""
    d = decide_replicas(ReplicaBounds(0, 8, 1e-300, 27.52), rps=[1e9], current=0, queue_depth=0, period_s=60)
    assert d.desired == 8
