"""Replicas that serve one request at a time (``max_concurrency``): what gpufleet and kpa hold for them."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.autoscale.baselines import KpaPolicy
from gpufleet.autoscale.erlang import servers_for
from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.bench.autoscale_sim import simulate
from gpufleet.bench.autoscale_traces import request_trace
from gpufleet.domain.errors import ValidationError
from gpufleet.ports import ReplicaSignals


def _cfg(**kw: object) -> ReplicaAutoscalerConfig:
    base: dict[str, object] = {
        "min_replicas": 0,
        "max_replicas": 50,
        "target_per_replica": 0.8 / 20.0,  # 20 s requests, 80% target
        "cold_start_s": 120.0,
        "slo_s": 2.0,
        "max_concurrency": 1,
    }
    base.update(kw)
    return ReplicaAutoscalerConfig(**base)  # type: ignore[arg-type]


def _sig(t: float, *, rps: float, in_flight: float, peak: float | None, ready: int = 1) -> ReplicaSignals:
    return ReplicaSignals(t, ready, 0, 5.0, rps, in_flight, 0, rps * 20.0, peak_concurrency=peak)


def test_the_burst_floor_holds_the_most_requests_recently_in_flight() -> None:
    pol = PredictiveReplicaAutoscaler(_cfg())
    d = pol.decide(_sig(5.0, rps=1.2, in_flight=5.0, peak=6.0))  # 6 requests at once, each needs a replica
    assert d.desired >= 6
    for k in range(2, 40):  # quiet, but within the floor's memory (10 cold starts = 20 min)
        d = pol.decide(_sig(5.0 * k, rps=0.01, in_flight=1.0, peak=1.0, ready=d.desired))
        assert d.desired >= 6


def test_the_burst_floor_uses_mean_concurrency_when_no_peak_is_measured() -> None:
    pol = PredictiveReplicaAutoscaler(_cfg())
    assert pol.decide(_sig(5.0, rps=0.8, in_flight=4.0, peak=None)).desired >= 4


def test_two_requests_per_replica_halve_the_floor() -> None:
    pol = PredictiveReplicaAutoscaler(_cfg(max_concurrency=2, max_replicas=3))
    assert pol.decide(_sig(5.0, rps=1.2, in_flight=5.0, peak=6.0)).desired == 3


def test_forecast_part_is_staffed_by_erlang_c() -> None:
    """A steady 0.5 rps of 20 s requests (10 replicas of load): Erlang C staffs more than the load, at least
    what the staffing rule asks for at the observed rate and service time."""
    pol = PredictiveReplicaAutoscaler(_cfg())
    d = None
    for k in range(1, 200):
        d = pol.decide(_sig(5.0 * k, rps=0.5, in_flight=0.0, peak=0.0, ready=d.desired if d else 1))
    assert d is not None
    assert d.desired >= servers_for(0.5 * 20.0, 2.0, 20.0, 0.005) > 10


def test_max_concurrency_and_wait_budget_are_checked() -> None:
    with pytest.raises(ValidationError, match="max_concurrency"):
        _cfg(max_concurrency=0)
    with pytest.raises(ValidationError, match="wait_miss_budget"):
        _cfg(wait_miss_budget=0.0)


def test_kpa_can_average_requests_in_flight() -> None:
    kpa = KpaPolicy(target_rps_per_replica=0.8, metric="concurrency")
    d = None
    for k in range(1, 40):  # 4 requests in flight on average, 0.2 rps: 4 / 0.8 = 5 replicas
        d = kpa.decide(_sig(2.0 * k, rps=0.2, in_flight=4.0, peak=4.0, ready=d.desired if d else 1))
    assert d is not None and d.desired == 5


def test_gpufleet_meets_a_one_at_a_time_slo_that_the_batched_arithmetic_would_oversize() -> None:
    """Clusters of 3 simultaneous 20 s requests every 3 minutes: three replicas serve them all in time."""
    t = np.concatenate([np.full(3, 60.0 + 180.0 * k) for k in range(20)])
    w = np.full(len(t), 20.0)
    tr = request_trace("clusters", t, w, 0.1)
    target = 0.8 * len(t) / float(w.sum())
    kw = {"cold_start_s": 120.0, "slo_s": 2.0, "gpus_per_replica": 1, "initial_replicas": 1, "queue": "exclusive"}
    r = simulate(tr, PredictiveReplicaAutoscaler(_cfg(target_per_replica=target)), **kw)  # type: ignore[arg-type]
    assert r.slo_attainment >= 0.9  # only the first cluster, before any history, may miss
    assert r.max_replicas <= 5
    # the batched pool's work arithmetic (a 3 x 20 s burst within 2 s = 15 replicas) holds far more
    fluid = simulate(tr, PredictiveReplicaAutoscaler(_cfg(target_per_replica=target, max_concurrency=None)), **kw)  # type: ignore[arg-type]
    assert fluid.mean_replicas > 3 * r.mean_replicas


def test_a_burst_of_short_requests_needs_the_fluid_slots_not_one_replica_each() -> None:
    """40 requests of 0.05 s at once (2 replica-seconds of work) start within a 2 s SLO on 1-2 replicas:
    the floor is at most the fluid requirement plus one slot, not the 40 requests in flight."""
    pol = PredictiveReplicaAutoscaler(_cfg(target_per_replica=0.8 / 0.05))
    sig = ReplicaSignals(5.0, 1, 0, 5.0, 8.0, 4.0, 0, 0.4, peak_work=((1.0, 2.0),), peak_concurrency=40.0)
    d = pol.decide(sig)
    assert d.desired <= 2
