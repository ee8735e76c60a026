"""control/serving_headroom.py: the newsvendor's z, the noise floor and the step pre-warm's Student-t tail."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.control.serving_headroom import SpareReplicas, newsvendor_z
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals

PERIOD = 900.0
FLEET = ServingScaling(min_replicas=1, max_replicas=400, target_rps_per_replica=10.0)


class Follows(RatePolicy):
    """An inner policy that asks for the last period's load (replicas at 100% busy)."""

    name = "follows"
    period_s = PERIOD

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        return ReplicaDecision(max(1, math.ceil(signals.load_replicas - 1e-9)), "follows")


def _sig(k: int, rps: float, ready: int) -> ReplicaSignals:
    return ReplicaSignals(k * PERIOD, ready, 0, PERIOD, rps, rps / 10.0, 0, rps / 10.0)


def _policy(breach: float = 0.01, price: float = 4.0, *, step_days: int = 0) -> SpareReplicas:
    sp = SpareReplicas(Follows(), PERIOD, spare=0, step_days=step_days, breach_cost_usd=breach)
    sp.declare_fleet(FLEET, gpus_per_replica=1, slo_s=2.0, max_concurrency=None, price_usd_per_replica_h=price)
    return sp


def _phi(z: float) -> float:
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


@given(
    sigma=st.floats(0.01, 1.0),
    price=st.floats(0.01, 100.0),
    rps=st.floats(0.1, 200.0),
    breach=st.floats(1e-4, 1.0),
)
def test_newsvendor_z_balances_a_replicas_price_against_the_requests_it_saves(
    sigma: float, price: float, rps: float, breach: float
) -> None:
    z = newsvendor_z(
        sigma, price_usd_per_replica_period=price, requests_per_replica_s=rps, breach_cost_usd=breach, period_s=PERIOD
    )
    target = price * sigma / (rps * PERIOD * breach)
    assert z >= 0.0
    if z > 0:  # at z the marginal replica's price equals the expected missed requests it saves
        assert math.isclose(_phi(z), target, rel_tol=1e-9)
    else:
        assert target >= _phi(0.0) - 1e-12
    # a dearer replica never holds more sigmas; a replica carrying more requests never holds fewer
    dearer = newsvendor_z(
        sigma,
        price_usd_per_replica_period=price * 2,
        requests_per_replica_s=rps,
        breach_cost_usd=breach,
        period_s=PERIOD,
    )
    busier = newsvendor_z(
        sigma,
        price_usd_per_replica_period=price,
        requests_per_replica_s=rps * 2,
        breach_cost_usd=breach,
        period_s=PERIOD,
    )
    assert dearer <= z + 1e-12 <= busier + 2e-12


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), noise=st.floats(0.02, 0.2), level=st.floats(50.0, 2000.0))
def test_noise_floor_never_asks_below_the_inner_policy_and_covers_the_noise(
    seed: int, noise: float, level: float
) -> None:
    """Stationary log-normal traffic: the fleet is never below what the inner policy asks, and (after the floor
    has a day of residuals) a period finds the fleet short about as rarely as the newsvendor's z says."""
    rng = np.random.default_rng(seed)
    rates = level * np.exp(rng.normal(0.0, noise, size=96 * 6))
    sp = _policy()
    ready = 1
    short = checked = 0
    for k in range(1, len(rates)):
        d = sp.decide(_sig(k, float(rates[k - 1]), ready), FLEET)
        inner_ask = max(1, math.ceil(rates[k - 1] / 10.0 - 1e-9))
        assert d.desired >= min(inner_ask, FLEET.max_replicas)
        assert d.desired <= FLEET.max_replicas
        ready = d.desired
        if k > 96 * 2:
            checked += 1
            short += ready * 10.0 < rates[k]
    assert short <= max(3, 0.01 * checked)  # z > 3 here: expected ~0.1% of periods short


def test_noise_floor_is_off_without_a_breach_cost_or_a_declared_price() -> None:
    rng = np.random.default_rng(3)
    rates = 500.0 * np.exp(rng.normal(0.0, 0.1, size=96 * 3))
    off = _policy(breach=0.0)
    no_price = SpareReplicas(Follows(), PERIOD, spare=0, step_days=0, breach_cost_usd=0.01)
    for k in range(1, len(rates)):
        for sp in (off, no_price):
            d = sp.decide(_sig(k, float(rates[k - 1]), 50), FLEET)
            assert d.reason == "follows" and d.desired == max(1, math.ceil(rates[k - 1] / 10.0 - 1e-9))


def test_a_dear_replica_holds_a_lower_noise_floor_than_a_cheap_one() -> None:
    rng = np.random.default_rng(5)
    rates = 500.0 * np.exp(rng.normal(0.0, 0.1, size=96 * 3))
    cheap, dear = _policy(price=1.0), _policy(price=200.0)
    held_cheap = held_dear = 0
    for k in range(1, len(rates)):
        held_cheap += cheap.decide(_sig(k, float(rates[k - 1]), 50), FLEET).desired
        held_dear += dear.decide(_sig(k, float(rates[k - 1]), 50), FLEET).desired
    assert held_dear < held_cheap


def test_step_tail_holds_more_than_the_largest_jump_seen_early_on() -> None:
    """A daily step whose size varies (log-normal): with a week of history the Student-t tail of the slot's jumps
    asks above the largest jump seen, and a step above that largest jump finds the fleet ready."""
    rng = np.random.default_rng(11)
    days = 12
    jump = np.exp(rng.normal(0.3, 0.15, size=days))
    jump[9] = jump[:9].max() * 1.15  # day 9 steps above every jump seen before

    def rate(k: int) -> float:
        return 100.0 * (float(jump[k // 96]) if k % 96 == 0 else 1.0)

    with_tail = _policy(price=1.0, step_days=91)
    max_only = SpareReplicas(Follows(), PERIOD, spare=0)  # the step pre-warm without the tail
    r_tail = r_max = 10
    for k in range(1, 96 * days):
        r_tail = with_tail.decide(_sig(k, rate(k - 1), r_tail), FLEET).desired
        r_max = max_only.decide(_sig(k, rate(k - 1), r_max), FLEET).desired
        if k == 96 * 9:
            assert r_tail * 10.0 >= rate(k) > r_max * 10.0
