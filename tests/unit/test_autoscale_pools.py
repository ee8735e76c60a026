"""The two service models of sim/queueing.py (the bench and the simulator): the exclusive pool against a plain
FCFS reference, and its signals."""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.baselines import StaticPolicy
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.bench.autoscale_sim import simulate
from gpufleet.bench.autoscale_traces import ArrivalTrace, request_trace
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals
from gpufleet.sim.queueing import BatchedPool, ExclusivePool

F64 = npt.NDArray[np.float64]


def fcfs_waits(t: F64, w: F64, servers: int) -> F64:
    """Reference: each request, in arrival order, starts on the server that frees first."""
    free = [0.0] * servers
    out = np.empty(len(t))
    for i in range(len(t)):
        start = max(float(t[i]), heapq.heappop(free))
        out[i] = start - t[i]
        heapq.heappush(free, start + float(w[i]))
    return out


def run_pool(trace: ArrivalTrace, servers: int, period_steps: int) -> tuple[ExclusivePool, list[tuple[float, float]]]:
    """Drive the pool like the simulator does with a constant fleet; returns (mean, peak) in flight per period."""
    n_steps = len(trace.count) + 10_000
    pool = ExclusivePool(trace, servers)
    seen = []
    for i in range(0, n_steps, period_steps):
        _, mean, peak = pool.observe(i, period_steps * trace.step_s)
        assert peak is not None
        seen.append((mean, peak))
        pool.advance(i, min(n_steps, i + period_steps), servers, deque())
    return pool, seen


arrivals = st.lists(
    st.tuples(st.floats(0.0, 200.0, allow_nan=False), st.floats(0.0, 30.0, allow_nan=False)), min_size=1, max_size=60
)


@settings(max_examples=80, deadline=None)
@given(arrivals, st.integers(1, 4), st.integers(1, 30))
def test_exclusive_pool_is_first_come_first_served_on_the_replica_that_frees_first(
    reqs: list[tuple[float, float]], servers: int, period_steps: int
) -> None:
    reqs.sort()
    t = np.array([r[0] for r in reqs])
    w = np.array([r[1] for r in reqs])
    tr = request_trace("x", t, w, 0.1)
    pool, _ = run_pool(tr, servers, period_steps)
    waits = pool.waits()
    np.testing.assert_allclose(waits, fcfs_waits(t, w, servers), atol=1e-9)
    start = t + waits
    assert np.all(np.diff(start) >= -1e-9), "a later arrival never starts first"
    # never more requests in service than replicas
    for x in start:
        busy = np.count_nonzero((start <= x + 1e-12) & (start + w > x + 1e-12))
        assert busy <= servers


@settings(max_examples=60, deadline=None)
@given(arrivals, st.integers(1, 3))
def test_in_flight_mean_and_peak_match_a_direct_count(reqs: list[tuple[float, float]], servers: int) -> None:
    reqs.sort()
    t = np.array([r[0] for r in reqs])
    w = np.array([r[1] for r in reqs])
    tr = request_trace("x", t, w, 0.1)
    period = 50  # steps = 5 s
    pool, seen = run_pool(tr, servers, period)
    finish = t + pool.waits() + w
    for k in range(1, len(seen)):
        lo, hi = (k - 1) * 5.0, k * 5.0
        mean, peak = seen[k]
        # exact: the time in flight of each request inside [lo, hi), and the count after each arrival in it
        overlap = np.clip(np.minimum(finish, hi) - np.maximum(t, lo), 0.0, None)
        assert mean == pytest.approx(overlap.sum() / 5.0, abs=1e-9)
        before = np.count_nonzero(t < lo) - np.count_nonzero(finish < lo)
        after = [np.count_nonzero(t <= x) - np.count_nonzero(finish <= x) for x in t[(t >= lo) & (t < hi)]]
        assert peak == max([before, *after])


class _OneThenZero(RatePolicy):
    """One replica, then none from t = 5 s (while its 30 s request is in service)."""

    name = "one_then_zero"
    period_s = 5.0

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision:
        return ReplicaDecision(1 if signals.now_s < 5.0 else 0, "test")


def test_a_busy_replica_removed_finishes_its_request_and_is_billed_until_then() -> None:
    tr = request_trace("x", np.array([0.0, 1.0]), np.array([30.0, 0.0]), 0.1)
    r = simulate(
        tr, _OneThenZero(), cold_start_s=0.0, slo_s=2.0, gpus_per_replica=1, initial_replicas=1, queue="exclusive"
    )
    assert r.slo_attainment == pytest.approx(0.5)  # the second request waits for a replica that never comes
    assert r.gpu_hours * 3600 == pytest.approx(30.0, abs=1e-6)  # 5 s billed as ready + 25 s of drain
    assert float(r.split_gpu_h.sum()) * 3600 == pytest.approx(30.0, abs=1e-6)


def test_constant_fleet_waits_agree_between_queue_models_when_requests_are_tiny() -> None:
    """With requests far shorter than the SLO, one-at-a-time and batched service give the same attainment."""
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 600, 400))
    w = np.full(400, 0.05)
    tr = request_trace("x", t, w, 0.1)
    kw = {"cold_start_s": 0.0, "slo_s": 2.0, "gpus_per_replica": 1, "initial_replicas": 2}
    a = simulate(tr, StaticPolicy(2), queue="batched", **kw)  # type: ignore[arg-type]
    b = simulate(tr, StaticPolicy(2), queue="exclusive", **kw)  # type: ignore[arg-type]
    assert a.slo_attainment == b.slo_attainment == 1.0
    assert a.gpu_hours == b.gpu_hours


def test_the_exclusive_queue_refuses_a_rate_series() -> None:
    tr = ArrivalTrace("rates", 1.0, np.array([3, 2], np.int64), np.array([1.0, 1.0]), 0.4)
    with pytest.raises(ValidationError, match="per-request"):
        simulate(tr, StaticPolicy(1), cold_start_s=0.0, slo_s=2.0, gpus_per_replica=1, queue="exclusive")


@settings(max_examples=60, deadline=None)
@given(arrivals, st.integers(1, 3), st.sampled_from(["batched", "exclusive"]), st.floats(0.5, 10.0))
def test_slo_misses_are_counted_once_each_when_their_wait_passes_the_slo(
    reqs: list[tuple[float, float]], servers: int, queue: str, slo_s: float
) -> None:
    """Summed over the periods, the misses the pool reports are the requests whose final wait exceeds the SLO
    (each counted in the period where its arrival + slo_s passes, never twice)."""
    reqs.sort()
    t = np.array([r[0] for r in reqs])
    w = np.array([r[1] for r in reqs])
    tr = request_trace("x", t, w, 0.1)
    n_steps = len(tr.count) + 5_000
    if queue == "exclusive":
        pool: ExclusivePool | BatchedPool = ExclusivePool(tr, servers)
    else:
        tail = n_steps - len(tr.count)
        work = np.cumsum(np.concatenate([tr.work_s, np.zeros(tail)])).tolist()
        pool = BatchedPool(tr, work, np.cumsum(np.concatenate([tr.count, np.zeros(tail, np.int64)])))
    counted = 0.0
    for i in range(0, n_steps, 20):
        pool.observe(i, 2.0)
        counted += pool.missed(i, slo_s)
        pool.advance(i, min(n_steps, i + 20), servers, deque())
    counted += pool.missed(n_steps, slo_s)
    waits = pool.waits()
    late = int(np.count_nonzero(waits > slo_s + 1e-6))
    edge = int(np.count_nonzero(np.abs(waits - slo_s) <= 1e-6))  # a wait equal to the SLO up to rounding
    assert late <= counted <= late + edge
