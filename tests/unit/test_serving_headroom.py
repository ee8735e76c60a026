"""control/serving_headroom.py: spare replicas and the step pre-warm, through the one replica-policy port."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals

PERIOD = 900.0
FLEET = ServingScaling(min_replicas=1, max_replicas=200, target_rps_per_replica=10.0)


class Follows(RatePolicy):
    """An inner policy that asks for the last period's load (replicas at 100% busy) and records what it saw."""

    name = "follows"
    period_s = PERIOD

    def __init__(self) -> None:
        self.seen: list[ReplicaSignals] = []

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        self.seen.append(signals)
        return ReplicaDecision(max(1, round(signals.load_replicas)), "follows")


def _sig(k: int, rps: float, ready: int) -> ReplicaSignals:
    return ReplicaSignals(k * PERIOD, ready, 0, PERIOD, rps, rps / 10.0, 0, rps / 10.0)


def _rate(k: int) -> float:
    """100 rps, and 160 rps in the first period of every day (a daily step at midnight)."""
    return 160.0 if k % 96 == 0 else 100.0


def test_the_inner_policy_sees_the_fleet_without_its_spare_and_the_spare_is_added_back() -> None:
    inner = Follows()
    sp = SpareReplicas(inner, PERIOD, spare=2, step_days=0)
    d = sp.decide(ReplicaSignals(0.0, 9, 3, PERIOD, 100.0, 10.0, 0, 10.0), FLEET)
    assert (inner.seen[0].ready, inner.seen[0].starting) == (9, 1)  # the spare comes off the starting first
    assert d.desired == 10 + 2 and d.reason == "follows"


def test_step_prewarm_holds_the_jump_seen_at_this_time_of_day_before_it_comes() -> None:
    sp = SpareReplicas(Follows(), PERIOD, spare=0)
    off = SpareReplicas(Follows(), PERIOD, spare=0, step_days=0)
    ready = ready_off = 10
    short_on = short_off = 0
    for k in range(1, 96 * 14):
        # the period that just ended (k - 1) had rate(k - 1); the decision serves period k
        rps = _rate(k - 1)
        d = sp.decide(_sig(k, rps, ready), FLEET)
        d_off = off.decide(_sig(k, rps, ready_off), FLEET)
        ready, ready_off = d.desired, d_off.desired
        if k >= 96 * 8:  # a week of history for every slot
            short_on += ready * 10.0 < _rate(k)
            short_off += ready_off * 10.0 < _rate(k)
            if k % 96 in (95, 0):  # the period before the step and the step itself are pre-warmed
                assert d.reason == "step_prewarm" and ready >= 16
            elif k % 96 in range(3, 94):  # the rest of the day the fleet follows the load
                assert ready == 10
    assert short_on == 0 and short_off == 6  # without the pre-warm, every midnight of days 8-13 finds it short


def test_step_prewarm_off_and_before_step_min_days_of_history_changes_nothing() -> None:
    sp = SpareReplicas(Follows(), PERIOD, spare=0)
    for k in range(1, 96 * sp.step_min_days):
        d = sp.decide(_sig(k, _rate(k - 1), 10), FLEET)
        assert d.reason != "step_prewarm"


def _warmed(**kw: object) -> SpareReplicas:
    """A policy with eight days of the daily midnight step seen (every slot has history)."""
    sp = SpareReplicas(Follows(), PERIOD, spare=0, **kw)  # type: ignore[arg-type]
    for k in range(1, 96 * 8):
        sp.decide(_sig(k, _rate(k - 1), 10), FLEET)
    return sp


def test_step_hold_keeps_the_ready_fleet_through_a_step_slot_and_not_elsewhere() -> None:
    k = 96 * 8 + 95  # the period before the midnight step: the pre-warm asks 16
    held = _warmed().decide(_sig(k, _rate(k - 1), 30), FLEET)
    assert (held.desired, held.reason) == (30, "step_hold")  # 30 ready are not cut to 16 before the step
    free = _warmed(step_hold=False).decide(_sig(k, _rate(k - 1), 30), FLEET)
    assert (free.desired, free.reason) == (16, "step_prewarm")
    mid = _warmed().decide(_sig(96 * 8 + 40, 100.0, 30), FLEET)  # mid-day: no step slot, the fleet follows
    assert mid.desired == 10


@given(ready=st.integers(0, 300), slot=st.integers(0, 95))
@settings(max_examples=40, deadline=None)
def test_step_hold_never_asks_fewer_than_without_it_and_never_below_ready_at_a_step(ready: int, slot: int) -> None:
    k = 96 * 8 + slot
    on, off = _warmed(), _warmed(step_hold=False)
    a = on.decide(_sig(k, _rate(k - 1), ready), FLEET)
    b = off.decide(_sig(k, _rate(k - 1), ready), FLEET)
    assert a.desired >= b.desired
    assert a.desired <= max(b.desired, min(ready, FLEET.max_replicas))  # it only keeps what is ready
    if b.reason == "step_prewarm":
        assert a.desired >= min(ready, FLEET.max_replicas)
