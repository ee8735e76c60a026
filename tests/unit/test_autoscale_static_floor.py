"""Issue 21's autoscaling decision: the static fleet the SLO needs for the traffic seen so far, and the floor
that holds it while the policy misses its SLO."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.autoscale.static_fleet import StaticFleetEstimate
from gpufleet.domain.errors import ValidationError
from gpufleet.ports import ReplicaSignals


def _sig(t: float, rps: float, ready: int, misses: float = 0.0) -> ReplicaSignals:
    return ReplicaSignals(t, ready, 0, 5.0, rps, rps * 0.1, 0, rps * 0.1, slo_misses=misses)


def _brute_static(reqs: list[tuple[float, float, float]], q: float = 0.99) -> float:
    """The fewest replicas n (among the requirements) at which >= q of every hour's requests are in periods
    needing <= n: the static fleet the hours need, counted directly."""
    hours: dict[int, list[tuple[float, float]]] = {}
    for t, r, n in reqs:
        hours.setdefault(int(t // 3600.0), []).append((r, n))
    best = 0.0
    for items in hours.values():
        total = sum(n for _, n in items)
        need = min(c for c, _ in items if sum(n for r, n in items if r <= c) >= q * total - 1e-9)
        best = max(best, need)
    return best


def test_static_estimate_is_the_static_fleet_of_the_hours_seen_and_never_decreases() -> None:
    rng = np.random.default_rng(7)
    est = StaticFleetEstimate(attainment=0.99, refresh_s=0.0)
    seen: list[tuple[float, float, float]] = []
    last = 0.0
    for k in range(3 * 720):  # three hours of 5 s periods
        t = 5.0 * k
        r = float(rng.choice([1.0, 2.0, 3.0, 9.0], p=[0.6, 0.3, 0.095, 0.005]))
        n = float(rng.integers(0, 4))
        est.record(t, r, n)
        if n > 0:
            seen.append((t, r, n))
        lvl = est.level(t)
        assert lvl >= last  # never forgets an hour
        last = lvl
        if k % 360 == 359:
            assert lvl == _brute_static(seen)


def _brute_static_recent(reqs: list[tuple[float, float, float]], now_s: float, memory_h: int) -> float:
    """The same, over the hours that began at most ``memory_h`` whole hours before the current one (which counts)."""
    hour = int(now_s // 3600.0)
    return _brute_static([x for x in reqs if int(x[0] // 3600.0) >= hour - memory_h])


def test_static_estimate_with_a_memory_forgets_hours_older_than_it() -> None:
    """A launch day, then a tenth of its traffic: with a memory the estimate is the static fleet of the recent
    hours (the fallback of a fleet whose traffic has fallen is not the launch's fleet); without one it keeps the
    launch's for ever."""
    rng = np.random.default_rng(11)
    memory_h = 3
    est = StaticFleetEstimate(attainment=0.99, refresh_s=0.0, memory_hours=memory_h)
    forever = StaticFleetEstimate(attainment=0.99, refresh_s=0.0)
    seen: list[tuple[float, float, float]] = []
    for k in range(10 * 720):  # ten hours of 5 s periods: two at the launch's level, then a tenth of it
        t = 5.0 * k
        scale = 10.0 if k < 2 * 720 else 1.0
        r = scale * float(rng.choice([1.0, 2.0, 3.0, 9.0], p=[0.6, 0.3, 0.095, 0.005]))
        n = float(rng.integers(0, 4))
        est.record(t, r, n)
        forever.record(t, r, n)
        if n > 0:
            seen.append((t, r, n))
        if k % 360 == 359 or k % 720 == 0:
            assert est.level(t) == _brute_static_recent(seen, t, memory_h)
            assert est.level(t) <= forever.level(t)
    assert forever.level(t) >= 20.0  # the launch hours' static fleet, kept
    assert est.level(t) <= 3.0  # the recent hours'
    with pytest.raises(ValidationError, match="static_memory_hours"):
        StaticFleetEstimate(memory_hours=0)


@settings(max_examples=60, deadline=None)
@given(
    periods=st.lists(
        st.tuples(st.floats(1.0, 9_000.0), st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.0]), st.floats(0.0, 50.0)),
        min_size=1,
        max_size=80,
    ),
    memory=st.integers(1, 6),
)
def test_static_estimate_memory_is_a_sliding_max_that_never_exceeds_the_running_one(
    periods: list[tuple[float, float, float]], memory: int
) -> None:
    """Periods at random gaps (hours skipped, silences): with a memory the estimate is the brute-force static fleet
    of the remembered hours, never above the estimate without one; a memory longer than the run is no memory."""
    t = 0.0
    short = StaticFleetEstimate(refresh_s=0.0, memory_hours=memory)
    forever = StaticFleetEstimate(refresh_s=0.0)
    long = StaticFleetEstimate(refresh_s=0.0, memory_hours=10**6)
    seen: list[tuple[float, float, float]] = []
    for gap, r, n in periods:  # the first period at t = 0, the origin of the estimate's hours (and of the count's)
        for est in (short, forever, long):
            est.record(t, r, n)
        if n > 0:
            seen.append((t, r, n))
        assert short.level(t) == _brute_static_recent(seen, t, memory)
        assert short.level(t) <= forever.level(t) == long.level(t)
        t += gap


def test_static_floor_holds_the_static_fleet_only_while_misses_exceed_the_budget() -> None:
    base = {"min_replicas": 0, "max_replicas": 100, "target_per_replica": 1.0, "cold_start_s": 120.0, "slo_s": 2.0}
    pol = PredictiveReplicaAutoscaler(ReplicaAutoscalerConfig(**base, static_floor_budget=0.01))  # type: ignore[arg-type]
    ready = 1
    # a burst then 25 quiet minutes (past the burst floor's memory, inside the hour): with 1% of requests in the
    # burst, the hour's static fleet is the burst's requirement
    for k in range(1, 300):
        rps = 400.0 if k == 5 else 1.0
        ready = pol.decide(_sig(5.0 * k, rps, ready)).desired
    assert pol._static is not None
    static = pol._static.level(1500.0)
    assert static > 10
    d = pol.decide(_sig(1500.0, 1.0, ready))
    assert d.desired < static  # no misses: the static floor does not bind, the burst floor has forgotten
    d = pol.decide(_sig(1505.0, 1.0, ready, misses=50.0))  # misses well over 1% of what was seen
    assert d.reason == "static_floor" and d.desired == math.ceil(static - 1e-9)
    with pytest.raises(ValidationError, match="static_floor_budget"):
        ReplicaAutoscalerConfig(**base, static_floor_budget=1.5)  # type: ignore[arg-type]
    # without an SLO there is no requirement to hold: the floor is off, whatever the budget
    assert PredictiveReplicaAutoscaler(ReplicaAutoscalerConfig(**base | {"slo_s": None}))._static is None  # type: ignore[arg-type]


def test_windowed_budget_lets_the_static_floor_go_once_the_misses_leave_the_window() -> None:
    base = {"min_replicas": 0, "max_replicas": 100, "target_per_replica": 1.0, "cold_start_s": 120.0, "slo_s": 2.0}

    def replay(window: float | None) -> list[tuple[int, str]]:
        pol = PredictiveReplicaAutoscaler(
            ReplicaAutoscalerConfig(**base, static_floor_budget=0.005, static_floor_window=window)  # type: ignore[arg-type]
        )
        ready, out = 1, []
        for k in range(1, 700):  # 10 rps (50 requests a period), a burst of 2,000 at k = 5, then 100 misses reported
            rps = 400.0 if k == 5 else 10.0
            d = pol.decide(_sig(5.0 * k, rps, ready, misses=100.0 if k == 6 else 0.0))
            ready = d.desired
            out.append((d.desired, d.reason))
        return out

    whole, last = replay(None), replay(1_000.0)
    # the burst's requirement (40 replica-loads over 5 + 2 s: 29 replicas) is the hour's static fleet; the burst
    # floor forgets it after 20 min (240 periods). 100 misses are over 0.5% of all requests seen until 20,000 have
    # been seen (k = 360), and of the last 1,000 only until they leave that window (about 20 periods)
    assert whole[300] == (29, "static_floor") and whole[-1][0] < 29
    assert last[300][0] < 29
    assert ReplicaAutoscalerConfig(**base).static_floor_window == 20_000.0  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="static_floor_window"):
        ReplicaAutoscalerConfig(**base, static_floor_window=0.0)  # type: ignore[arg-type]


def test_static_floor_with_a_memory_holds_the_recent_hours_fleet_not_a_launchs() -> None:
    """A fleet whose traffic fell to a tenth after its first hours: a burst's misses make the static floor hold a
    fixed fleet; with a memory of 2 hours that is the recent hours' fleet, without one the launch's (the
    all-time peak hour, held while the misses stay in the budget's window)."""
    base = {"min_replicas": 0, "max_replicas": 100, "target_per_replica": 1.0, "cold_start_s": 120.0, "slo_s": 2.0}

    def replay(memory: int | None) -> tuple[int, str]:
        pol = PredictiveReplicaAutoscaler(
            ReplicaAutoscalerConfig(**base, static_memory_hours=memory)  # type: ignore[arg-type]
        )
        ready = 1
        for k in range(1, 6 * 720 + 1):  # two hours at 20 rps, then four at 2 rps; requests of one replica-second
            rps = 20.0 if k <= 2 * 720 else 2.0
            misses = 200.0 if k == 6 * 720 else 0.0  # a burst's misses, 1% of the last 20,000 requests: it burns
            s = ReplicaSignals(5.0 * k, ready, 0, 5.0, rps, rps, 0, rps, slo_misses=misses)
            d = pol.decide(s)
            ready = d.desired
        return d.desired, d.reason

    launch, recent = replay(None), replay(2)
    assert launch[1] == "static_floor" and launch[0] >= 18  # the launch hours' fleet (20 replica-loads)
    assert recent[0] <= 3  # the recent hours' fleet (2 replica-loads; the burst floor's as much), not the launch's
