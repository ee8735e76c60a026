"""The SLO error budget of the gpufleet replica autoscaler (``slo_miss_budget``)."""

from __future__ import annotations

import pytest

from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.domain.errors import ValidationError
from gpufleet.ports import ReplicaSignals

# the static floor (on by default) is another rule: off here, so that these tests see the error budget alone
BASE = {
    "min_replicas": 0,
    "max_replicas": 50,
    "target_per_replica": 1.0,
    "cold_start_s": 120.0,
    "slo_s": 2.0,
    "static_floor_budget": None,
}


def _sig(t: float, *, rps: float, misses: float | None, ready: int, peak: float = 0.0) -> ReplicaSignals:
    """A period of ``rps`` arrivals whose densest second held ``peak`` replica-seconds of work."""
    return ReplicaSignals(t, ready, 0, 5.0, rps, 0.0, 0, rps, peak_work=((1.0, peak),), slo_misses=misses)


def _replay(misses_in_burst: float | None) -> list[tuple[int, str]]:
    """A burst that needs 10 replicas, then 0.1 rps for 100 minutes (1,200 periods, 600 requests)."""
    pol = PredictiveReplicaAutoscaler(ReplicaAutoscalerConfig(**BASE))  # type: ignore[arg-type]
    d = pol.decide(_sig(5.0, rps=10.0, misses=misses_in_burst, ready=1, peak=30.0))
    out = [(d.desired, d.reason)]
    for k in range(2, 1201):
        d = pol.decide(_sig(5.0 * k, rps=0.1, misses=0.0 if misses_in_burst is not None else None, ready=d.desired))
        out.append((d.desired, d.reason))
    return out


def test_a_burning_budget_makes_the_burst_floor_stop_forgetting() -> None:
    calm = _replay(0.0)
    burning = _replay(5.0)  # 5 misses in the first 50 requests: more than 2 of the last 400
    at = {k: (calm[k][0], burning[k][0]) for k in (10, 100, 300)}
    assert at[10][0] >= 10 and at[10][1] >= 10  # both hold the burst's replicas within the floor's 20 min
    assert at[300][0] < 10  # 25 min later the calm policy has forgotten the burst
    assert at[300][1] >= 10  # the burning one has not: its last 400 requests still hold 5 misses
    # 400 requests later (50 in the burst, then 700 periods of 0.5) the misses leave the window: it forgets
    assert burning[-1][0] < 10


def test_no_miss_signal_means_no_budget_rule() -> None:
    assert _replay(None) == _replay(0.0)


def test_slo_miss_budget_is_checked() -> None:
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValidationError, match="slo_miss_budget"):
            ReplicaAutoscalerConfig(**BASE, slo_miss_budget=bad)  # type: ignore[arg-type]
    assert ReplicaAutoscalerConfig(**BASE).slo_miss_budget == 0.005  # type: ignore[arg-type]
