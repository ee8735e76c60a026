"""control/serving_headroom.py: the step pre-warm during a stock-out of a GPU type that fleets share."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.control.serving_headroom import SpareReplicas, stockout_jump
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals

PERIOD = 900.0
DAY = 96
FLEET = ServingScaling(min_replicas=1, max_replicas=200, target_rps_per_replica=10.0)
SIBLING = ServingScaling(min_replicas=1, max_replicas=200, target_rps_per_replica=25.0)
STEPS = (1.3, 2.5, 1.2)  # the midnight step of day d is STEPS[d % 3]: mostly small, now and then large


class Follows(RatePolicy):
    """An inner policy that asks for the last period's load (replicas at 100% busy)."""

    name = "follows"
    period_s = PERIOD

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        return ReplicaDecision(max(1, round(signals.load_replicas)), "follows")


def _rate(k: int) -> float:
    return 100.0 * STEPS[(k // DAY) % 3] if k % DAY == 0 else 100.0


def _sig(k: int, ready: int, *, stocked_out: bool = False) -> ReplicaSignals:
    rps = _rate(k - 1)  # the period that just ended
    return ReplicaSignals(k * PERIOD, ready, 0, PERIOD, rps, rps / 10.0, 0, rps / 10.0, stocked_out=stocked_out)


def _warmed(*, sibling: bool = True, days: int = 9) -> SpareReplicas:
    """Nine days of the midnight step seen; the fleet declared on L40S, with or without a sibling fleet on it."""
    sp = SpareReplicas(Follows(), PERIOD, spare=0)
    sp.declare_fleet(FLEET, gpus_per_replica=1, slo_s=None, max_concurrency=None, gpu_type="l40s")
    sp.declare_fleet(
        SIBLING, gpus_per_replica=1, slo_s=None, max_concurrency=None, gpu_type="l40s" if sibling else "h100"
    )
    for k in range(1, DAY * days):
        sp.decide(_sig(k, 10), FLEET)
    return sp


def test_out_of_stock_the_pre_warm_holds_the_median_step_not_the_largest() -> None:
    k = DAY * 9 + 95  # the period before midnight: slot 0's steps of days 1-9 are 1.3, 2.5, 1.2, ... (median 1.3)
    in_stock = _warmed().decide(_sig(k, 10), FLEET)
    assert (in_stock.desired, in_stock.reason) == (25, "step_prewarm")  # 10 x the largest step, 2.5
    out = _warmed().decide(_sig(k, 10, stocked_out=True), FLEET)
    assert (out.desired, out.reason) == (13, "stockout_prewarm")  # 10 x the median step, 1.3


def test_a_fleet_alone_on_its_gpu_type_keeps_the_in_stock_pre_warm_in_a_stockout() -> None:
    k = DAY * 9 + 95
    alone = _warmed(sibling=False).decide(_sig(k, 10, stocked_out=True), FLEET)
    assert (alone.desired, alone.reason) == (25, "step_prewarm")


def test_an_undeclared_gpu_type_keeps_the_in_stock_pre_warm() -> None:
    sp = SpareReplicas(Follows(), PERIOD, spare=0)
    for k in range(1, DAY * 9):
        sp.decide(_sig(k, 10), FLEET)
    d = sp.decide(_sig(DAY * 9 + 95, 10, stocked_out=True), FLEET)
    assert (d.desired, d.reason) == (25, "step_prewarm")


@given(jumps=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=91))
def test_stockout_jump_is_the_median_and_within_the_jumps_seen(jumps: list[float]) -> None:
    h = deque(jumps, maxlen=91)
    logs = np.log(np.array(jumps + [7.0] * (91 - len(jumps))))  # the slot's array past its jumps is not read
    got = stockout_jump({0: logs}, {0: h}, 0)
    assert min(jumps) * (1 - 1e-9) <= got <= max(jumps) * (1 + 1e-9)
    assert math.isclose(got, math.exp(float(np.median(np.log(jumps)))), rel_tol=1e-12)
    assert stockout_jump({}, {}, 1) == 0.0  # a slot with no jumps


@given(ready=st.integers(0, 300), slot=st.integers(0, DAY - 1))
@settings(max_examples=40, deadline=None)
def test_a_stockout_never_asks_more_than_in_stock(ready: int, slot: int) -> None:
    k = DAY * 9 + slot
    out = _warmed().decide(_sig(k, ready, stocked_out=True), FLEET)
    ins = _warmed().decide(_sig(k, ready), FLEET)
    assert out.desired <= ins.desired
    assert out.desired >= min(max(1, round(_rate(k - 1) / 10.0)), FLEET.max_replicas)  # never below the inner ask
