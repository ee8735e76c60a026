"""A queueing model of a pool of GPU replicas, driven by a replica policy.

Model (docs/autoscale.md): the pool serves work (replica-seconds, from the token-throughput model or a
measured service time) first come first served, either continuous-batching style (``queue="batched"``, a
fluid server: a request starts as soon as the pool has finished the work queued ahead of it) or one request
per replica (``queue="exclusive"``); sim/queueing.py holds both (the simulator's serving world uses the same module). A replica launched at ``t`` serves
from ``t + cold_start_s``; it is billed from launch.
Requests that arrive while nothing is ready are held in the queue (the request-holding path) and served in
order once a replica is ready. The trace is followed by a tail of ``cold_start_s + 60`` s with no arrivals so
that held requests can finish; a request not started by then counts as an SLO miss.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.bench.autoscale_traces import ArrivalTrace
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler, ReplicaSignals
from gpufleet.sim.queueing import QUEUE_MODELS as QUEUES
from gpufleet.sim.queueing import START_EPS_S, BatchedPool, ExclusivePool, Pool
from gpufleet.sim.queueing import QueueModel as Queue

F64 = npt.NDArray[np.float64]
__all__ = ["PEAK_WINDOWS_S", "QUEUES", "START_EPS_S", "Queue", "SimResult", "bench_scaling", "simulate"]
PEAK_WINDOWS_S = (1.0, 2.0, 3.0, 4.0)  # the windows of ``ReplicaSignals.peak_work`` (those shorter than a period)


@dataclass(slots=True)
class SimResult:
    """What one policy did on one trace."""

    policy: str
    gpu_hours: float
    slo_attainment: float
    cold_starts: int
    requests: int
    mean_replicas: float
    max_replicas: int
    p99_wait_s: float
    unserved: int
    gpu_hours_2nd_half: float = 0.0  # the second half of the trace: held out while choosing defaults
    slo_attainment_2nd_half: float = 1.0
    worst_hour_slo: float = 1.0  # lowest attainment of any clock hour of the trace (hours from its start)
    reasons: dict[str, int] = field(default_factory=dict)
    replicas_t: list[tuple[float, int]] = field(default_factory=list)
    # per ``split_s`` window of the replay (from its start, the tail included): requests arriving, requests
    # meeting the SLO, GPU-hours billed - to split a result by time (e.g. the first 15 minutes)
    split_s: float = 60.0
    split_requests: F64 = field(default_factory=lambda: np.zeros(0))
    split_met: F64 = field(default_factory=lambda: np.zeros(0))
    split_gpu_h: F64 = field(default_factory=lambda: np.zeros(0))

    def window(self, start_s: float, end_s: float) -> tuple[float, float]:
        """(GPU-hours, SLO attainment) of the whole split windows in ``[start_s, end_s)`` (1 if no request)."""
        a = max(0, int(start_s // self.split_s + 1e-9))
        b = max(0, int(end_s // self.split_s + 1e-9))
        n = float(self.split_requests[a:b].sum())
        met = float(self.split_met[a:b].sum())
        return float(self.split_gpu_h[a:b].sum()), (met / n if n else 1.0)


def simulate(
    trace: ArrivalTrace,
    policy: ReplicaAutoscaler,
    *,
    cold_start_s: float,
    slo_s: float,
    gpus_per_replica: int,
    initial_replicas: int = 0,
    record_every_s: float = 0.0,
    split_s: float = 60.0,
    queue: Queue = "batched",
    scaling: ServingScaling | None = None,
) -> SimResult:
    """Replay ``trace`` through the ``queue`` model with ``policy`` deciding every ``policy.period_s`` (through the
    replica-policy port, ``policy.decide(signals, scaling)``). ``scaling``: the fleet's declared scaling (None: 0 to
    10,000 replicas, the cold start given, 60 s scale-down delay)."""
    if scaling is None:
        scaling = bench_scaling(1.0, 10_000, cold_start_s)
    dt = trace.step_s
    tail = math.ceil((cold_start_s + 60.0) / dt)
    n_req_steps = len(trace.count)
    n_steps = n_req_steps + tail
    a_cum = np.cumsum(np.concatenate([trace.work_s, np.zeros(tail)]))
    n_cum = np.cumsum(np.concatenate([trace.count, np.zeros(tail, np.int64)]))
    a_list = a_cum.tolist()
    pool: Pool = ExclusivePool(trace, initial_replicas) if queue == "exclusive" else BatchedPool(trace, a_list, n_cum)
    p = max(1, round(policy.period_s / dt))
    cold_steps = max(0, round(cold_start_s / dt))
    ready = initial_replicas
    starting: deque[int] = deque()
    rep_s = 0.0
    rep_s_2nd = 0.0
    half_step = n_req_steps // 2
    launches = 0
    max_rep = ready
    reasons: dict[str, int] = {}
    trail: list[tuple[float, int]] = []
    changes: list[tuple[int, int]] = [(0, ready)]  # (step, replicas billed from that step on)
    drains: list[tuple[float, float]] = []  # spans billed for removed replicas finishing a request
    rec_p = max(1, round(record_every_s / dt)) if record_every_s > 0 else 0
    # densest window_s of arrivals ending inside each decision period (a gateway's per-second counters); a window
    # may begin in the period before, so a burst at a period boundary shows in both periods' peaks
    a0 = np.concatenate([[0.0], a_cum])
    peaks: list[tuple[float, list[float]]] = []
    starts = np.arange(0, n_steps, p)
    for win_s in PEAK_WINDOWS_S:
        k = max(1, round(win_s / dt))
        if k >= p:
            continue
        roll = np.concatenate([np.zeros(k - 1), a0[k:] - a0[:-k]])  # work of the k steps ending at step j
        peaks.append((k * dt, np.maximum.reduceat(roll, starts).tolist()))
    per_s = p * dt
    for i in range(0, n_steps, p):
        # -- observe the last period and decide --------------------------------------------------------
        if i > 0:
            lo = i - p - 1
            arrived_n = int(n_cum[i - 1] - (n_cum[lo] if lo >= 0 else 0))
            arrived_w = a_list[i - 1] - (a_list[lo] if lo >= 0 else 0.0)
        else:
            arrived_n, arrived_w = 0, 0.0
        qd, conc, peak_conc = pool.observe(i, per_s)
        sig = ReplicaSignals(
            now_s=i * dt,
            ready=ready,
            starting=len(starting),
            period_s=per_s,
            arrival_rps=arrived_n / per_s,
            concurrency=conc,
            queue_depth=qd,
            load_replicas=arrived_w / per_s,
            peak_work=tuple((w, pk[i // p - 1]) for w, pk in peaks) if i > 0 else (),
            peak_concurrency=peak_conc,
            slo_misses=pool.missed(i, slo_s),
        )
        d = policy.decide(sig, scaling)
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
        total = ready + len(starting)
        if d.desired > total:
            for _ in range(d.desired - total):
                starting.append(i + cold_steps)
            launches += d.desired - total
        elif d.desired < total:
            drop = total - d.desired
            while drop and starting:
                starting.pop()  # cancel the youngest launch first
                drop -= 1
            drains += pool.remove(drop, i * dt)
            ready -= drop
        total = ready + len(starting)
        if total != changes[-1][1]:
            changes.append((i, total))
        max_rep = max(max_rep, total)
        end = min(n_steps, i + p)
        rep_s += total * (end - i) * dt
        if end > half_step:
            rep_s_2nd += total * (end - max(i, half_step)) * dt
        if rec_p and (i // p) % max(1, rec_p // p) == 0:
            trail.append((i * dt, total))
        # -- advance the queue -----------------------------------------------------------------------
        ready = pool.advance(i, end, ready, starting)
    rep_s += sum(b - a for a, b in drains)
    rep_s_2nd += sum(max(0.0, b - max(a, half_step * dt)) for a, b in drains)
    waits = pool.waits()
    n = int(trace.count.sum())
    met = (
        int(np.count_nonzero(waits <= slo_s + 1e-9))
        if trace.req_t_s is not None
        else int(trace.count[waits <= slo_s + 1e-9].sum())
    )
    ok = waits <= slo_s + 1e-9
    if trace.req_t_s is not None:
        late_half = trace.req_t_s >= half_step * dt
        n2, met2 = int(late_half.sum()), int(np.count_nonzero(ok & late_half))
    else:
        n2 = int(trace.count[half_step:].sum())
        met2 = int(trace.count[half_step:][ok[half_step:]].sum())
    worst_hour = _worst_hour(trace, ok, dt)
    m_req, m_met, m_gpu = _per_window(trace, ok, changes, drains, n_steps, dt, gpus_per_replica, split_s)
    finite = waits[np.isfinite(waits)]
    if trace.req_t_s is None:
        weights = trace.count.astype(np.float64)
        p99 = _weighted_quantile(waits, weights, 0.99)
        unserved = int(trace.count[~np.isfinite(waits)].sum())
    else:
        p99 = float(np.quantile(waits, 0.99)) if len(finite) == len(waits) else math.inf
        unserved = int(np.count_nonzero(~np.isfinite(waits)))
    return SimResult(
        policy=policy.name,
        gpu_hours=rep_s * gpus_per_replica / 3600.0,
        slo_attainment=met / n if n else 1.0,
        cold_starts=launches,
        requests=n,
        mean_replicas=rep_s / (n_steps * dt),
        max_replicas=max_rep,
        p99_wait_s=p99,
        unserved=unserved,
        gpu_hours_2nd_half=rep_s_2nd * gpus_per_replica / 3600.0,
        slo_attainment_2nd_half=met2 / n2 if n2 else 1.0,
        worst_hour_slo=worst_hour,
        reasons=reasons,
        replicas_t=trail,
        split_s=split_s,
        split_requests=m_req,
        split_met=m_met,
        split_gpu_h=m_gpu,
    )


def bench_scaling(rps_per_replica: float, max_replicas: int, cold_start_s: float) -> ServingScaling:
    """The fleet the bench replays: scale to zero allowed, ``rps_per_replica`` at 100% busy, the cold start given
    (whole seconds), a 60 s scale-down delay (gpufleet's window; hpa keeps its own 300 s)."""
    return ServingScaling(
        min_replicas=0,
        max_replicas=max_replicas,
        target_rps_per_replica=rps_per_replica,
        cold_start_s=round(cold_start_s),
        scale_down_delay_s=60,
    )


def _per_window(
    trace: ArrivalTrace,
    ok: npt.NDArray[np.bool_],
    changes: list[tuple[int, int]],
    drains: list[tuple[float, float]],
    n_steps: int,
    dt: float,
    gpus_per_replica: int,
    split_s: float,
) -> tuple[F64, F64, F64]:
    """Requests, requests meeting the SLO and GPU-hours in each ``split_s`` window of the replay."""
    n_min = max(1, math.ceil(n_steps * dt / split_s - 1e-9))
    if trace.req_t_s is not None:
        m = np.minimum((trace.req_t_s / split_s + 1e-9).astype(np.int64), n_min - 1)
        req = np.bincount(m, minlength=n_min).astype(np.float64)
        met = np.bincount(m, weights=ok.astype(np.float64), minlength=n_min)
    else:
        m = np.minimum((np.arange(len(trace.count)) * dt / split_s + 1e-9).astype(np.int64), n_min - 1)
        req = np.asarray(np.bincount(m, weights=trace.count.astype(np.float64), minlength=n_min), np.float64)
        met = np.bincount(m, weights=np.where(ok, trace.count, 0).astype(np.float64), minlength=n_min)
    # billed replica-seconds up to each window boundary, from the piecewise-constant replica count
    at = np.array([c[0] for c in changes], dtype=np.float64) * dt
    val = np.array([c[1] for c in changes], dtype=np.float64)
    cum_at = np.concatenate([[0.0], np.cumsum(val[:-1] * np.diff(at))])
    edges = np.minimum(np.arange(n_min + 1) * split_s, n_steps * dt)
    k = np.searchsorted(at, edges, side="right") - 1
    cum = cum_at[k] + val[k] * (edges - at[k])
    rep_s = np.diff(cum)
    for lo_s, hi_s in drains:  # a removed replica finishing its request: billed in the windows it spans
        w0, w1 = int(lo_s // split_s), min(n_min - 1, int(hi_s // split_s))
        for w in range(w0, w1 + 1):
            rep_s[w] += max(0.0, min(hi_s, (w + 1) * split_s) - max(lo_s, w * split_s))
    return req, np.asarray(met, np.float64), np.asarray(rep_s * gpus_per_replica / 3600.0, np.float64)


def _worst_hour(trace: ArrivalTrace, ok: npt.NDArray[np.bool_], dt: float) -> float:
    """Lowest SLO attainment over the trace's hours (hour k = arrivals in [3600 k, 3600 (k + 1)) s)."""
    if trace.req_t_s is not None:
        hour = (trace.req_t_s // 3600.0).astype(np.int64)
        n = np.bincount(hour)
        met = np.bincount(hour, weights=ok.astype(np.float64))
    else:
        hour = (np.arange(len(trace.count)) * dt // 3600.0).astype(np.int64)
        n = np.bincount(hour, weights=trace.count.astype(np.float64))
        met = np.bincount(hour, weights=np.where(ok, trace.count, 0).astype(np.float64))
    has = n > 0
    return float(np.min(met[has] / n[has])) if has.any() else 1.0


def _weighted_quantile(x: F64, w: F64, q: float) -> float:
    m = w > 0
    if not m.any():
        return 0.0
    xs, ws = x[m], w[m]
    order = np.argsort(xs, kind="stable")
    cw = np.cumsum(ws[order])
    return float(xs[order][np.searchsorted(cw, q * cw[-1])])
