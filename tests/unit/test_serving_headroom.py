"""control/serving_headroom.py: spare replicas and the step pre-warm, through the one replica-policy port."""

from __future__ import annotations

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
