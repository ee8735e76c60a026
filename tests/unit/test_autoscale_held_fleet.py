"""Analysis helper of bench autoscale (issue 21): the misses of a burst when k replicas are held through it."""

from __future__ import annotations

import itertools

import numpy as np

from gpufleet.bench.autoscale_oracle import held_fleet_misses, trace_window
from gpufleet.bench.autoscale_traces import ArrivalTrace


def _burst_trace() -> ArrivalTrace:
    """200 s on a 0.1 s grid: one 1 s request at t = 10 s, then at t = 100-110 s three 1 s requests per second
    (3 replicas of work for 10 s)."""
    step, n = 0.1, 2000
    count = np.zeros(n, np.int64)
    work = np.zeros(n)
    times = [10.0] + [100.0 + i / 3.0 for i in range(30)]
    for t in times:
        j = round(t / step)
        count[j] += 1
        work[j] += 1.0
    t_s = np.round(np.array(times) / step) * step
    return ArrivalTrace("burst", step, count, work, 1.0, t_s, np.ones(len(times)))


def test_trace_window_keeps_only_the_window_and_retimes_it() -> None:
    tr = _burst_trace()
    part = trace_window(tr, 90.0, 200.0)
    assert int(part.count.sum()) == 30
    assert part.req_t_s is not None and part.req_work_s is not None
    assert len(part.req_t_s) == 30
    assert abs(float(part.req_t_s.min()) - 10.0) < 1e-9
    assert abs(part.duration_s - 110.0) < 1e-6


def test_held_fleet_misses_fall_to_zero_at_the_burst_requirement() -> None:
    tr = _burst_trace()
    for queue in ("batched", "exclusive"):
        out = held_fleet_misses(tr, 90.0, 200.0, slo_s=2.0, queue=queue)
        # non-increasing in the fleet held, ends at the first fleet that misses nothing
        assert all(a >= b for a, b in itertools.pairwise(out))
        assert out[-1] == 0 and all(m > 0 for m in out[:-1])
        # 3 replicas of work: one replica cannot keep a 2 s wait; three always can (one per request's second)
        assert out[0] > 0
        assert len(out) <= 3
    # the lone early request is outside the window: a window holding only it misses nothing with one replica
    assert held_fleet_misses(tr, 0.0, 50.0, slo_s=2.0) == [0]
    assert held_fleet_misses(tr, 20.0, 90.0, slo_s=2.0, queue="exclusive") == [0]  # a window without requests
