"""One replica-policy interface (issue 15): the bench runs the very objects the control loop holds, through
ports.ReplicaAutoscaler, and the rate-only entry (``desired``) is the same decision as ``decide``."""

from __future__ import annotations

import math

import pytest

from gpufleet.autoscale.baselines import HpaPolicy, KpaPolicy, StaticPolicy
from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.bench.autoscale import BenchSettings, build_policies, fleet_scaling
from gpufleet.control.loop import ControlLoop
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler, rate_signals

FLEET = ServingScaling(min_replicas=1, max_replicas=40, target_rps_per_replica=10.0, cold_start_s=120)


def test_the_bench_measures_the_classes_the_control_loop_holds() -> None:
    built = build_policies(10.0, 5, BenchSettings(), gpus_per_replica=4)
    gpufleet, baseline = ControlLoop.gpufleet(seed=0), ControlLoop.baseline(seed=0)
    # the loop wraps the bench's policy in its serving headroom (spare replicas, control/serving_headroom.py)
    assert isinstance(gpufleet.autoscaler, SpareReplicas)
    assert type(built["gpufleet"]) is type(gpufleet.autoscaler.inner) is PredictiveReplicas
    assert type(built["hpa"]) is type(baseline.autoscaler) is HpaPolicy
    for p in (*built.values(), gpufleet.autoscaler, baseline.autoscaler):
        assert isinstance(p.name, str) and p.period_s > 0
        _port: ReplicaAutoscaler = p  # type-checked: every policy implements the one port


def test_desired_is_decide_on_the_rate_signals() -> None:
    a, b = PredictiveReplicas(900), PredictiveReplicas(900)
    cur = 2
    for k, rps in enumerate([5.0, 40.0, 120.0, 80.0, 0.0, 0.0, 300.0]):
        now = 900 * (k + 1)
        want, why = a.desired(current=cur, observed_rps=rps, scaling=FLEET, now_s=now, last_scale_down_s=0)
        d = b.decide(rate_signals(cur, rps, FLEET, now, 900.0), FLEET)
        assert (want, why) == (d.desired, d.reason)
        assert FLEET.min_replicas <= want <= FLEET.max_replicas
        cur = want
    with pytest.raises(ValidationError, match="target_rps_per_replica"):
        rate_signals(1, 1.0, ServingScaling(0, 4, 0.0), 0, 60.0)


def test_predictive_replicas_keeps_one_policy_per_fleet_and_the_fleets_settings() -> None:
    p = PredictiveReplicas(5.0, 0.8, slo_s=2.0, options={"static_floor_budget": None})
    other = ServingScaling(min_replicas=0, max_replicas=7, target_rps_per_replica=2.0, cold_start_s=60)
    assert p.fleet(FLEET) is p.fleet(FLEET) and p.fleet(FLEET) is not p.fleet(other)
    cfg = p.fleet(other).config
    assert (cfg.max_replicas, cfg.target_per_replica, cfg.cold_start_s) == (7, 1.6, 60.0)
    assert cfg.static_floor_budget is None and cfg.slo_s == 2.0
    with pytest.raises(ValidationError, match="options"):
        PredictiveReplicas(5.0, options={"no_such_field": 1}).fleet(FLEET)


def test_hpa_reads_the_fleet_and_its_scale_up_limit_compounds_over_a_long_period() -> None:
    hpa = HpaPolicy(target_utilization=0.7, scale_down_stabilization_s=None)
    # called every 15 s: at most max(2x, +4) per sync
    assert hpa.decide(rate_signals(2, 300.0, FLEET, 15, 15.0), FLEET).desired == 6
    # called by a world every 900 s (60 syncs): the limit does not bind, the fleet's max does
    slow = HpaPolicy(target_utilization=0.7, scale_down_stabilization_s=None)
    slow.decide(rate_signals(2, 10.0, FLEET, 0, 900.0), FLEET)
    d = slow.decide(rate_signals(2, 300.0, FLEET, 900, 900.0), FLEET)
    assert d.desired == min(FLEET.max_replicas, math.ceil(300.0 / 10.0 / 0.7))
    # the scale-down window is the fleet's scale_down_delay_s (300 s): 200 s later it still holds the high
    assert slow.decide(rate_signals(d.desired, 0.0, FLEET, 1100, 900.0), FLEET).desired == d.desired
    assert slow.decide(rate_signals(d.desired, 0.0, FLEET, 1500, 900.0), FLEET).desired == FLEET.min_replicas


def test_the_baselines_honour_the_fleets_bounds() -> None:
    tight = ServingScaling(min_replicas=2, max_replicas=3, target_rps_per_replica=1.0)
    s = rate_signals(2, 1_000.0, tight, 0, 2.0)
    assert KpaPolicy(target_rps_per_replica=1.0).decide(s, tight).desired == 3
    assert StaticPolicy(5).decide(s, tight).desired == 5  # a static fleet is its own size
    quiet = rate_signals(3, 0.0, tight, 0, 15.0)
    assert HpaPolicy(target_utilization=0.8, scale_down_stabilization_s=0.0).decide(quiet, tight).desired == 2


def test_the_bench_fleet_allows_zero_and_carries_the_cold_start() -> None:
    sc = fleet_scaling(6.65, BenchSettings(cold_start_s=120.0, max_replicas=500))
    assert (sc.min_replicas, sc.max_replicas, sc.cold_start_s, sc.target_rps_per_replica) == (0, 500, 120, 6.65)
