"""Capacity held for bursts that arrive faster than a cold start (the gpufleet policy's burst floor).

A burst that starts after a silence gives no warning: replicas launched when it is seen are ready a cold start
later, long after a seconds-scale SLO has been missed. The only capacity that serves it is capacity already
held. So the policy keeps a *burst floor*: the replicas that the recent bursts needed to meet the SLO.

A fleet of ``n`` replicas (a fluid server of ``n`` replica-seconds per second) keeps every wait within
``slo_s`` iff every interval of length ``tau`` brings at most ``n * (tau + slo_s)`` replica-seconds of work.
So the *requirement* of a decision period is the largest ``work(tau) / (tau + slo_s)`` over the intervals that
end with it: ``tau`` = 1, 2, ... whole periods back (up to ``span_s``), and the densest short windows ending in
it (``ReplicaSignals.peak_work``, a gateway's per-second counters).

The floor is the request-weighted ``quantile`` of the requirement over the last ``memory_s`` seconds: the
fewest replicas that would have served that share of the recent requests in time. Bursts are heavy: one
burst period holds more than 1 - quantile of a window's requests, so in practice this is the largest recent
requirement. A period does not delay all of its requests, though: with ``n`` replicas the densest interval
(``work`` in ``tau``) keeps the work ahead of an arrival above ``n * slo_s`` for about ``work / n - tau -
slo_s`` seconds, and only the requests arriving then wait too long. So the floor then goes down whole replicas
while the requests delayed that way (the period's rate times that time, at most its requests) stay within
the same ``1 - quantile`` of the recent requests (session 31: in light traffic one long request was a
period's worth of requests and held a replica more for the whole memory). Periods recorded without their
densest interval (``in_flight`` replicas, or :meth:`BurstFloor.record` alone) count all their requests, as
before. A held replica is released ``memory_s`` after the last burst that needed it: rent or buy - a
replica released between bursts is not back before the next one (no warning, cold start >> SLO), so it is
kept while bursts that need it recur within ``memory_s`` (a multiple of the cold start: releasing and
relaunching it costs at least one cold start of GPU time plus the burst it misses).

The fluid arithmetic fits replicas that batch (an LLM under continuous batching). A replica that serves one
request at a time (``max_concurrency`` requests at most, Knative's ``containerConcurrency``) cannot share a
request's work with its neighbours: a request that finds every replica busy waits for one to finish, a whole
service time, not ``work / replicas``. There the requirement of a period is at most the most requests in
flight at once, over the concurrency (``in_flight`` of :meth:`BurstFloor.observe`, fed by
``ReplicaSignals.peak_concurrency``), and at most one slot more than the fluid arithmetic.
"""

from __future__ import annotations

import math
from collections import deque

from gpufleet.domain.errors import ValidationError


class BurstFloor:
    """Request-weighted upper quantile of the recent per-period replica requirement."""

    def __init__(
        self, *, slo_s: float, memory_s: float, quantile: float, span_s: float = 60.0, net_own_work: bool = False
    ) -> None:
        if slo_s <= 0 or memory_s <= 0 or span_s <= 0:
            raise ValidationError("burst_floor", "slo_s, memory_s and span_s must be > 0")
        if not 0.5 <= quantile <= 1.0:
            raise ValidationError("burst_quantile", f"must be in [0.5, 1], got {quantile}")
        self.slo_s = slo_s
        self.memory_s = memory_s
        self.quantile = quantile
        self.span_s = span_s
        # off by default (opt-in, proposal of docs/benchmarks/autoscale.md "Held-out: Alibaba GenAI SD"): an
        # interval's last request waits only for the work AHEAD of it, so one request's own work (the period's
        # mean request) is taken off each interval's work; matters when a request is long against the SLO
        self.net_own_work = net_own_work
        self._recent: deque[tuple[float, float, float]] = deque()  # (end time, duration, work) of periods
        # (time, requirement, requests, requests per second, densest interval's length and work; -1: unknown)
        self._obs: deque[tuple[float, float, float, float, float, float]] = deque()
        self._requests = 0.0
        # while True nothing is forgotten (the SLO error budget of autoscale/replica.py burns); set by the caller
        self.keep_all = False
        self.peak = 0.0  # the largest requirement recorded since the start (never forgotten)

    def requirement(
        self,
        period_s: float,
        load_replicas: float,
        peak_work: tuple[tuple[float, float], ...] = (),
        own_work: float = 0.0,
    ) -> float:
        """Replicas needed for the intervals ending now (uses the periods already recorded); ``own_work``
        (replica-seconds) is taken off each interval's work (0 unless ``net_own_work``)."""
        return self._densest(period_s, load_replicas, peak_work, own_work)[0]

    def _densest(
        self, period_s: float, load_replicas: float, peak_work: tuple[tuple[float, float], ...], own_work: float
    ) -> tuple[float, float, float]:
        """(requirement, length and work of the interval that sets it)."""
        own = own_work if self.net_own_work else 0.0
        work = load_replicas * period_s
        tau = period_s
        intervals = [(tau, work), *peak_work]
        for _, d, w in reversed(self._recent):
            work += w
            tau += d
            intervals.append((tau, work))
        req, best_tau, best_work = -math.inf, period_s, 0.0
        for t, w in intervals:
            r = (w - own) / (t + self.slo_s)
            if r > req:
                req, best_tau, best_work = r, t, w - own
        return max(0.0, req), best_tau, best_work

    def observe(
        self,
        now_s: float,
        period_s: float,
        load_replicas: float,
        requests: float,
        peak_work: tuple[tuple[float, float], ...] = (),
        in_flight: float | None = None,
        per_replica: int = 1,
    ) -> float:
        """Record one period: its arriving load (replicas at 100%), the work in its densest short windows
        (``(window_s, replica-seconds)``) and the requests it brought (the weight of its requirement).

        ``in_flight`` (replicas that serve ``per_replica`` requests each, one at a time per slot): the most
        requests in flight in the period. Each needs its own slot at most, and a slot that would need to split a
        request is at most one more than the fluid requirement, so the period needs
        ``min(in_flight, fluid + 1) / per_replica`` replicas: the in-flight count for requests long against the
        SLO (an SD image), the fluid work arithmetic for short ones (a burst of 0.1 s requests is one slot).
        Returns the period's requirement (replicas).
        """
        own = load_replicas * period_s / requests if requests > 0 else 0.0
        req, tau, work = self._densest(period_s, load_replicas, peak_work, own)
        if in_flight is not None:  # one-request slots: the fluid delay below does not apply
            req, tau, work = min(in_flight, req + 1.0) / per_replica, -1.0, -1.0
        self._recent.append((now_s, period_s, max(0.0, load_replicas * period_s)))
        while self._recent and self._recent[0][0] <= now_s - self.span_s + 1e-9:
            self._recent.popleft()
        self._record(now_s, req, requests, requests / period_s, tau, work)
        return req

    def record(self, now_s: float, requirement: float, requests: float) -> None:
        """Record a period's requirement (replicas) directly, weighted by the requests it brought (all of them
        count as delayed below it)."""
        self._record(now_s, requirement, requests, 0.0, -1.0, -1.0)

    def _record(self, now_s: float, requirement: float, requests: float, rate: float, tau: float, work: float) -> None:
        req = max(0.0, requirement)
        if requests > 0:
            self.peak = max(self.peak, req)
            self._obs.append((now_s, req, requests, rate, tau, work))
            self._requests += requests
        while not self.keep_all and self._obs and self._obs[0][0] <= now_s - self.memory_s:
            self._requests -= self._obs.popleft()[2]

    def level(self) -> float:
        """Replicas that would have served ``quantile`` of the recent requests within the SLO (0 if none)."""
        if not self._obs or self._requests <= 0:
            return 0.0
        items = sorted(self._obs, key=lambda o: o[1])
        need = self.quantile * self._requests
        acc = 0.0
        level = items[-1][1]
        for o in items:
            acc += o[2]
            if acc >= need - 1e-9:
                level = o[1]
                break
        budget = (1.0 - self.quantile) * self._requests + 1e-9
        n = math.ceil(level - 1e-9) - 1
        best = level
        while n >= 1 and self._delayed(items, n) <= budget:  # delayed requests only shrink as n grows
            best, n = float(n), n - 1
        return best

    def _delayed(self, items: list[tuple[float, float, float, float, float, float]], n: int) -> float:
        """Requests that ``n`` replicas would have served late: per period above ``n``, those arriving while its
        densest interval's work keeps more than ``n * slo_s`` ahead of them (all of a period without one)."""
        out = 0.0
        for _, req, requests, rate, tau, work in reversed(items):  # highest requirement first
            if req <= n:
                break
            if tau < 0:
                out += requests
            else:
                out += min(requests, rate * max(0.0, work / n - tau - self.slo_s))
        return out
