"""Serving queues: the physics of a pool of GPU replicas serving requests, for the simulator and the benchmarks.

Two service models, the same in both users:

* batched (continuous batching, an LLM on vLLM): the pool is a fluid FIFO server of ``ready`` replica-seconds of
  work per second; a request starts when the pool has done the work queued ahead of it.
* exclusive (one request per replica at a time: an image-diffusion model, an un-batched endpoint): ``ready``
  servers, first come first served.

:class:`BatchedPool` and :class:`ExclusivePool` replay a measured trace step by step (``gpufleet bench
autoscale``): cumulative done work ``U[j] = min(U[j-1] + ready_j * step_s, A[j])`` (``A`` = cumulative arrived
work) is exact for a fluid FIFO queue at step resolution; the exclusive pool keeps exact per-request event
times. A replica that becomes ready serves from that step on. A replica removed while busy (exclusive pool
only; the fluid pool has no per-replica work) finishes its request and is billed until it does - a graceful
drain.

:class:`PeriodQueue` is the simulator's serving queue (sim/serving.py): the simulator knows one request rate per
control period, not single requests, so it runs the same fluid FIFO in closed form over the period's segments
of constant ready count: the backlog ``Q`` (replica-seconds of queued work) changes at ``rate * work - ready``
and a request arriving with ``Q`` queued waits ``Q / ready`` (the FIFO's wait at the capacity of the moment;
with no ready replica it waits for one: a miss). The exclusive model adds, while nothing is backlogged, the
M/M/c wait of one-request servers (Erlang C: ``P(wait > t) = C(c, a) exp(-(c - a) t / work)``). The cost per
period and fleet is a few scalar operations per segment, whatever the request rate.

Admission control: a :class:`PeriodQueue` given ``shed_wait_s`` (the loop's gateway limit, sim/serving.py) admits a
request only while its wait at arrival ``Q / ready`` is at most the limit and sheds it otherwise (a miss that takes
no GPU work); the backlog is then capped at ``ready * shed_wait_s`` (:meth:`PeriodQueue._serve_capped`). Without
it the queue is the unbounded FIFO above.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
START_EPS_S = 1e-9  # replica-seconds of a request's own work that mark its start (batched pool)
QueueModel = Literal["batched", "exclusive"]
QUEUE_MODELS: tuple[QueueModel, ...] = ("batched", "exclusive")


class ArrivalSteps(Protocol):
    """Arrivals on a regular grid of ``step_s`` (the benchmark's ``ArrivalTrace`` is one).

    count[j] / work_s[j]: requests and replica-seconds of work arriving in step j; req_t_s / req_work_s:
    per-request arrival times and work (request traces only; None for rate series)."""

    @property
    def step_s(self) -> float: ...
    @property
    def count(self) -> I64: ...
    @property
    def work_s(self) -> F64: ...
    @property
    def mean_work_s(self) -> float: ...
    @property
    def req_t_s(self) -> F64 | None: ...
    @property
    def req_work_s(self) -> F64 | None: ...


class Pool(Protocol):
    def observe(self, i: int, per_s: float) -> tuple[int, float, float | None]:
        """At the start of step ``i``: queued requests; requests in flight (queued + in service) on average over
        the last ``per_s``; the most in flight at any instant of it (None if the model has no such count)."""
        ...

    def missed(self, i: int, slo_s: float) -> float:
        """Requests whose wait passed ``slo_s`` since the last call, up to the start of step ``i`` (a gateway
        sees a queued request's age cross the SLO; a request counts once, when its arrival + ``slo_s`` passes)."""
        ...

    def remove(self, drop: int, now_s: float) -> list[tuple[float, float]]:
        """Take ``drop`` ready replicas away at ``now_s``; the ``(from_s, to_s)`` spans still billed (drains)."""
        ...

    def advance(self, i: int, end: int, ready: int, starting: deque[int]) -> int:
        """Serve steps ``[i, end)``, bringing up the launches of ``starting`` (ready step, oldest first) whose
        step comes; returns the ready count at ``end``."""
        ...

    def waits(self) -> F64:
        """Each request's wait until it starts (inf if it never did): per request, or per step of a rate trace."""
        ...


class BatchedPool:
    """Continuous batching: a fluid FIFO server (module docstring)."""

    def __init__(self, trace: ArrivalSteps, arrived_work: list[float], arrived_n: npt.NDArray[np.int64]) -> None:
        """``arrived_work`` / ``arrived_n``: cumulative work and requests arrived by the end of each step of the
        replay (the simulator's own arrays, not copied: the 19.9 M steps of the SD trace are a 637 MB list)."""
        self.trace = trace
        self.dt = trace.step_s
        n_steps = len(arrived_work)
        self._a = arrived_work
        self._n = arrived_n
        self._per_req_k: list[float] | None = None
        if trace.req_work_s is not None:
            self._per_req_k = (np.cumsum(trace.req_work_s) - trace.req_work_s).tolist()
        self._u_arr = np.empty(n_steps)
        self._u = 0.0
        self._prev_u = 0.0
        # what a request (or a step's requests, for a rate series) must see done to have started, and when
        # it arrived: a request missed its SLO iff done work at arrival + slo_s is still short of it
        if trace.req_t_s is not None and trace.req_work_s is not None:
            w = trace.req_work_s
            self._k: F64 = np.cumsum(w) - w + np.minimum(w, START_EPS_S)
            self._t_k: F64 = trace.req_t_s
            self._n_k: F64 = np.ones(len(w))
        else:
            self._k = np.asarray(np.concatenate([[0.0], np.cumsum(trace.work_s)[:-1]]) + 0.5 * trace.work_s, np.float64)
            self._t_k = np.asarray((np.arange(len(trace.count)) + 0.5) * self.dt, np.float64)
            self._n_k = trace.count.astype(np.float64)
        self._miss_at = 0

    def observe(self, i: int, per_s: float) -> tuple[int, float, float | None]:
        if i == 0:
            return 0, 0.0, None
        queued_w = self._a[i - 1] - self._u
        if self._per_req_k is not None:
            qd = int(self._n[i - 1]) - bisect_right(self._per_req_k, self._u)
        else:
            qd = math.ceil(queued_w / self.trace.mean_work_s - 1e-9) if queued_w > 1e-12 else 0
        busy = (self._u - self._prev_u) / per_s  # replica-equivalents of work done (fluid)
        self._prev_u = self._u
        return max(0, qd), qd + busy, None

    def missed(self, i: int, slo_s: float) -> float:
        now = i * self.dt
        lo = self._miss_at
        hi = int(np.searchsorted(self._t_k, now - slo_s, side="left"))
        if hi <= lo:
            return 0.0
        self._miss_at = hi
        x = self._t_k[lo:hi] + slo_s  # < now: the done work up to x is known
        j = np.minimum((x / self.dt).astype(np.int64), i - 1)
        u_prev = np.where(j > 0, self._u_arr[np.maximum(j - 1, 0)], 0.0)
        u_x = u_prev + (x / self.dt - j) * (self._u_arr[j] - u_prev)  # linear inside step j
        return float(self._n_k[lo:hi][u_x < self._k[lo:hi] - 1e-12].sum())

    def remove(self, drop: int, now_s: float) -> list[tuple[float, float]]:
        del drop, now_s
        return []

    def advance(self, i: int, end: int, ready: int, starting: deque[int]) -> int:
        dt = self.dt
        a, u_arr, u = self._a, self._u_arr, self._u
        cap = ready * dt
        for j in range(i, end):
            if starting and starting[0] <= j:
                while starting and starting[0] <= j:
                    starting.popleft()
                    ready += 1
                cap = ready * dt
            u = min(u + cap, a[j])
            u_arr[j] = u
        self._u = u
        return ready

    def waits(self) -> F64:
        tr, dt = self.trace, self.dt
        if tr.req_t_s is not None and tr.req_work_s is not None:
            # a request starts when the pool begins its own work (done work passes the work ahead of it), not
            # when the work ahead is done: with no replica ready and an empty queue it waits for a replica
            k = np.cumsum(tr.req_work_s) - tr.req_work_s + np.minimum(tr.req_work_s, START_EPS_S)
            return np.maximum(0.0, _start_times(self._u_arr, dt, k) - tr.req_t_s)
        a_prev = np.concatenate([[0.0], np.cumsum(tr.work_s)[:-1]])
        k = a_prev + 0.5 * tr.work_s
        t_arr = (np.arange(len(tr.count)) + 0.5) * dt
        return np.maximum(0.0, _start_times(self._u_arr, dt, k) - t_arr)


class ExclusivePool:
    """One request per replica at a time, first come first served (module docstring)."""

    def __init__(self, trace: ArrivalSteps, initial_ready: int) -> None:
        if trace.req_t_s is None or trace.req_work_s is None:
            raise ValidationError("queue", "the exclusive queue needs a per-request trace (a rate series has none)")
        self.dt = trace.step_s
        self._t_arr: F64 = trace.req_t_s
        self._t: list[float] = trace.req_t_s.tolist()
        self._w: list[float] = trace.req_work_s.tolist()
        self._start = np.full(len(self._t), np.inf)
        self._next = 0  # first request not yet arrived in the replay
        self._waiting: deque[int] = deque()
        self._free: list[float] = [0.0] * initial_ready  # heap: when each ready replica is next free
        # in-flight count (arrived, not finished), swept from the last observation to the next
        self._done: list[float] = []  # heap: finish times of started requests not yet swept
        self._seen = 0  # arrivals swept
        self._in_flight = 0
        self._obs_s = 0.0
        self._miss_at = 0

    def observe(self, i: int, per_s: float) -> tuple[int, float, float | None]:
        """Sweep arrivals and finishes since the last observation: the time-mean and the peak in flight
        (every finish before ``now`` is known: its request started in an earlier period)."""
        del per_s
        now = i * self.dt
        t, done = self._t, self._done
        at, n = self._obs_s, self._in_flight
        area, peak = 0.0, float(n)
        while True:
            ta = t[self._seen] if self._seen < len(t) and t[self._seen] < now else math.inf
            td = done[0] if done and done[0] < now else math.inf
            if ta == math.inf and td == math.inf:
                break
            x = min(ta, td)
            area += n * (x - at)
            at = x
            if td <= ta:  # a request that finishes as another arrives frees its replica first
                heapq.heappop(done)
                n -= 1
            else:
                self._seen += 1
                n += 1
                peak = max(peak, float(n))
        area += n * (now - at)
        mean = area / (now - self._obs_s) if now > self._obs_s else float(n)
        self._obs_s, self._in_flight = now, n
        return len(self._waiting), mean, peak

    def missed(self, i: int, slo_s: float) -> float:
        now = i * self.dt
        lo = self._miss_at
        hi = int(np.searchsorted(self._t_arr, now - slo_s, side="left"))
        if hi <= lo:
            return 0.0
        self._miss_at = hi
        late = self._start[lo:hi] > self._t_arr[lo:hi] + slo_s + 1e-9  # never started: inf
        return float(np.count_nonzero(late))

    def remove(self, drop: int, now_s: float) -> list[tuple[float, float]]:
        # the replicas that free first go: idle ones at once, busy ones after their request (billed till then)
        drains: list[tuple[float, float]] = []
        for _ in range(min(drop, len(self._free))):
            f = heapq.heappop(self._free)
            if f > now_s:
                drains.append((now_s, f))
        return drains

    def advance(self, i: int, end: int, ready: int, starting: deque[int]) -> int:
        dt = self.dt
        t1 = end * dt
        while starting and starting[0] < end:
            heapq.heappush(self._free, starting.popleft() * dt)
            ready += 1
        t, w, waiting, free = self._t, self._w, self._waiting, self._free
        while self._next < len(t) and t[self._next] < t1:
            waiting.append(self._next)
            self._next += 1
        while waiting and free:
            k = waiting[0]
            s = max(free[0], t[k])
            if s >= t1:
                break
            heapq.heapreplace(free, s + w[k])
            heapq.heappush(self._done, s + w[k])
            self._start[k] = s
            waiting.popleft()
        return ready

    def waits(self) -> F64:
        return np.asarray(np.maximum(0.0, self._start - self._t_arr), np.float64)


def _start_times(u_arr: F64, dt: float, k: F64) -> F64:
    """Time at which cumulative done work first reaches ``k`` (linear inside a step; inf if never)."""
    u_ext = np.concatenate([[0.0], u_arr])
    j = np.searchsorted(u_ext, k - 1e-12, side="left")
    out = np.full(len(k), np.inf)
    ok = j < len(u_ext)
    jj = j[ok]
    prev = u_ext[np.maximum(jj - 1, 0)]
    cur = u_ext[jj]
    span = np.where(cur > prev, cur - prev, 1.0)
    frac = np.clip((k[ok] - prev) / span, 0.0, 1.0)
    out[ok] = np.where(jj == 0, 0.0, (np.maximum(jj - 1, 0) + frac) * dt)
    return out


@dataclass(frozen=True, slots=True)
class PeriodServed:
    """What one period of a :class:`PeriodQueue` did: ``requests`` arrived, ``missed`` of them waited longer than
    the SLO; ``queue_depth`` requests wait at the end; ``concurrency`` / ``peak_concurrency`` requests in flight
    (queued + in service) on average / at most; ``load_replicas`` replicas the arrivals keep 100% busy;
    ``duration_s`` the time served (a whole control period, or the part of one before a queue-growth observation).
    """

    requests: float
    missed: float
    queue_depth: int
    concurrency: float
    peak_concurrency: float
    load_replicas: float
    duration_s: float = 0.0
    shed: float = 0.0  # of the missed requests, those the gateway rejected at arrival (admission control)


def combine(parts: Sequence[PeriodServed]) -> PeriodServed:
    """One period served in consecutive parts (split by queue-growth observations, sim/serving.py) as one: requests
    and misses add up, the means are time-weighted, the peak is the largest part's, the queue is the last part's.
    One part is returned as it is."""
    if len(parts) == 1:
        return parts[0]
    total_d = sum(p.duration_s for p in parts)
    if total_d <= 0:
        return parts[-1]
    return PeriodServed(
        sum(p.requests for p in parts),
        sum(p.missed for p in parts),
        parts[-1].queue_depth,
        sum(p.concurrency * p.duration_s for p in parts) / total_d,
        max(p.peak_concurrency for p in parts),
        sum(p.load_replicas * p.duration_s for p in parts) / total_d,
        total_d,
        sum(p.shed for p in parts),
    )


def erlang_c_tail(servers: int, load: float, wait_s: float, work_s: float) -> float:
    """P(wait > ``wait_s``) in M/M/``servers`` with offered ``load`` (servers) and mean service ``work_s``."""
    if load <= 0.0:
        return 0.0
    if servers <= load:
        return 1.0
    b = 1.0  # Erlang B by its stable recursion, then Erlang C
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    c = servers * b / (servers - load * (1.0 - b))
    return c * math.exp(-(servers - load) * wait_s / work_s) if work_s > 0 else 0.0


class PeriodQueue:
    """The simulator's serving queue: one FIFO per serving fleet, served period by period (module docstring).

    ``work_s``: replica-seconds of work per request (one replica serves ``1 / work_s`` requests per second at
    100%); ``slo_s``: the latency SLO on the queue wait; ``shed_wait_s``: the gateway's admission limit (module
    docstring, "Admission control"; None: every request is queued). State: the backlog carried from period to
    period."""

    def __init__(self, model: QueueModel, work_s: float, slo_s: float, shed_wait_s: float | None = None) -> None:
        if model not in QUEUE_MODELS:
            raise ValidationError("queue", f"must be one of {', '.join(QUEUE_MODELS)}, got {model!r}")
        if work_s <= 0 or slo_s < 0:
            raise ValidationError("work_s", "need work_s > 0 and slo_s >= 0")
        if shed_wait_s is not None and shed_wait_s < 0:
            raise ValidationError("shed_wait_s", "need shed_wait_s >= 0 (or None: no admission limit)")
        self.model = model
        self.work_s = work_s
        self.slo_s = slo_s
        self.shed_wait_s = shed_wait_s
        self.backlog = 0.0  # replica-seconds of work queued
        self._tail: dict[tuple[int, float], float] = {}

    def _erlang_tail(self, servers: int, load: float) -> float:
        key = (servers, round(load, 3))  # the M/M/c tail moves smoothly with the load: 1e-3 servers is plenty
        got = self._tail.get(key)
        if got is None:
            if len(self._tail) > 65_536:
                self._tail.clear()
            got = self._tail[key] = erlang_c_tail(servers, key[1], self.slo_s, self.work_s)
        return got

    def serve(self, rate_rps: float, segments: Sequence[tuple[float, int]]) -> PeriodServed:
        """Serve arrivals at ``rate_rps`` through ``segments`` (duration s, ready replicas), in time order."""
        if self.shed_wait_s is not None:
            return self._serve_capped(rate_rps, segments, self.shed_wait_s)
        w, slo = self.work_s, self.slo_s
        rho = rate_rps * w  # work arriving per second (replica-seconds per second)
        q = self.backlog
        missed = area_q = done = total_d = 0.0
        peak = q
        peak_busy = 0.0
        for d, c in segments:
            if d <= 0:
                continue
            total_d += d
            mu = float(c)
            s = rho - mu
            q_end = q + s * d
            if c <= 0:  # no replica: every request waits for one
                missed += rate_rps * d
                area_q += (q + q_end) / 2 * d
                peak = max(peak, q_end)
                q = q_end
                continue
            theta = mu * slo  # a request arriving with more than this queued waits longer than the SLO
            if s > 0:
                t_star = (theta - q) / s
                late = d - min(max(t_star, 0.0), d)
                area_q += (q + q_end) / 2 * d
                done += mu * d
                busy_for = d
            elif s < 0:
                t_star = (q - theta) / -s
                late = min(max(t_star, 0.0), d)
                t_empty = min(d, q / -s)
                area_q += (q + (q + s * t_empty)) / 2 * t_empty
                done += mu * t_empty + rho * (d - t_empty)
                busy_for = t_empty
                q_end = max(0.0, q_end)
            else:
                late = d if q > theta else 0.0
                area_q += q * d
                done += mu * d
                busy_for = d if q > 0 else 0.0
            missed += rate_rps * late
            if self.model == "exclusive" and busy_for < d and rho < mu:  # M/M/c waits while nothing is backlogged
                missed += rate_rps * (d - busy_for) * self._erlang_tail(c, rho)
            peak = max(peak, q, q_end)
            peak_busy = max(peak_busy, mu if busy_for > 0 else min(rho, mu))
            q = q_end
        self.backlog = q
        if total_d <= 0:
            return PeriodServed(0.0, 0.0, math.ceil(q / w - 1e-9), 0.0, 0.0, 0.0)
        requests = rate_rps * total_d
        return PeriodServed(
            requests,
            min(missed, requests),
            max(0, math.ceil(q / w - 1e-9)),
            area_q / total_d / w + done / total_d,
            peak / w + peak_busy,
            rho,
            total_d,
        )

    def _serve_capped(self, rate_rps: float, segments: Sequence[tuple[float, int]], limit_s: float) -> PeriodServed:
        """:meth:`serve` behind a gateway that admits a request only while its wait at arrival (``Q / ready``) is at
        most ``limit_s``: the backlog is capped at ``ready * limit_s``, the arriving work above it is shed. Per
        segment of ``c > 0`` ready replicas, up to three phases: (A) a backlog above the cap (capacity just fell)
        drains at ``c`` while every arrival is shed; (B) below the cap the uncapped fluid, until (C) it reaches the
        cap, where ``c`` of the arriving work per second is admitted (late iff the cap is above ``c * slo_s``) and
        the rest shed. With no ready replica every arrival is shed and the backlog waits."""
        w, slo = self.work_s, self.slo_s
        rho = rate_rps * w
        q = self.backlog
        late = shed = area_q = done = total_d = 0.0  # late and shed in requests
        peak = q
        peak_busy = 0.0
        for d, c in segments:
            if d <= 0:
                continue
            total_d += d
            if c <= 0:  # no replica: every arrival is shed (it would miss anyway); the admitted backlog waits
                shed += rate_rps * d
                area_q += q * d
                continue
            mu = float(c)
            cap, theta = mu * limit_s, mu * slo
            busy_for = 0.0
            if q > cap:  # (A)
                ta = min(d, (q - cap) / mu)
                shed += rate_rps * ta
                area_q += (q - mu * ta / 2) * ta
                done += mu * ta
                busy_for = ta
                q = max(cap, q - mu * ta) if ta < d else q - mu * ta
                d -= ta
            s = rho - mu
            if d > 0 and s > 0:  # (B) then (C)
                tb = min(d, max(0.0, (cap - q) / s))
                late += rate_rps * (tb - min(max((theta - q) / s, 0.0), tb))
                area_q += (q + s * tb / 2) * tb
                q = cap if tb < d else q + s * tb
                tc = d - tb
                shed += (rho - mu) / w * tc
                if cap > theta:
                    late += mu / w * tc
                area_q += q * tc
                done += mu * d
                busy_for += d
            elif d > 0 and s < 0:  # (B), draining
                late += rate_rps * min(max((q - theta) / -s, 0.0), d)
                t_empty = min(d, q / -s)
                area_q += (q + s * t_empty / 2) * t_empty
                done += mu * t_empty + rho * (d - t_empty)
                busy_for += t_empty
                q = max(0.0, q + s * d)
                if self.model == "exclusive" and t_empty < d:  # M/M/c waits while nothing is backlogged
                    late += rate_rps * (d - t_empty) * self._erlang_tail(c, rho)
            elif d > 0:
                late += rate_rps * d if q > theta else 0.0
                area_q += q * d
                done += mu * d
                busy_for += d if q > 0 else 0.0
            peak = max(peak, q)
            peak_busy = max(peak_busy, mu if busy_for > 0 else min(rho, mu))
        self.backlog = q
        if total_d <= 0:
            return PeriodServed(0.0, 0.0, math.ceil(q / w - 1e-9), 0.0, 0.0, 0.0)
        requests = rate_rps * total_d
        shed = min(shed, requests)
        return PeriodServed(
            requests,
            min(late + shed, requests),
            max(0, math.ceil(q / w - 1e-9)),
            area_q / total_d / w + done / total_d,
            peak / w + peak_busy,
            rho,
            total_d,
            shed,
        )
