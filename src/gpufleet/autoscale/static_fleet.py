"""The static fleet the SLO needs for the traffic seen so far, estimated causally (issue 21).

``static_peak`` of ``gpufleet bench autoscale`` is the fewest constant replicas that meet the SLO for at least
99% of the requests of *every hour* of a trace; it is sized in hindsight, on the whole trace. This is the same
quantity over the hours seen so far, from what the autoscaler observes: each decision period brings a
*requirement* (the replicas that would have served every request of the intervals ending with it within the SLO:
:meth:`gpufleet.autoscale.burst_hold.BurstFloor.observe`) and a number of requests. An hour's static fleet is
the request-weighted ``attainment`` quantile of its periods' requirements (the fewest replicas at which that share
of the hour's requests would have met the SLO); the estimate is the largest over the hours seen, the current
partial hour included, or with ``memory_hours`` over the hours that began at most that many hours before the current
one (a sliding maximum: a fleet whose traffic has fallen is not held to the fleet of its launch). Without a memory
it never decreases; it never exceeds the hindsight static fleet of the hours it covers by more than the
requirement arithmetic's own error (the fluid bound of a period; for one-request replicas, at most one slot).

Cost: O(periods of the current hour) per refresh; the current hour is re-read at most once per ``refresh_s``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

import numpy as np

from gpufleet.domain.errors import ValidationError

_SMALL_HOUR = 32  # periods in an hour up to which :meth:`StaticFleetEstimate._quantile` runs in plain Python


class StaticFleetEstimate:
    """Running (or, with ``memory_hours``, sliding) max over hours of the request-weighted ``attainment`` quantile
    of the period requirement."""

    def __init__(
        self,
        attainment: float = 0.99,
        hour_s: float = 3600.0,
        refresh_s: float = 60.0,
        memory_hours: int | None = None,
    ) -> None:
        if not 0.5 <= attainment <= 1.0:
            raise ValidationError("static_attainment", f"must be in [0.5, 1], got {attainment}")
        if hour_s <= 0 or refresh_s < 0:
            raise ValidationError("static_hour_s", "hour_s must be > 0 and refresh_s >= 0")
        if memory_hours is not None and memory_hours < 1:
            raise ValidationError("static_memory_hours", f"must be >= 1 hour or None, got {memory_hours}")
        self.attainment = attainment
        self.hour_s = hour_s
        self.refresh_s = refresh_s
        self.memory_hours = memory_hours
        self._origin: float | None = None
        self._hour = -1
        self._req: list[float] = []
        self._n: list[float] = []
        self._best = 0.0  # the largest static fleet of a finished hour (within the memory)
        # with a memory: the finished hours that can still be the largest, (hour, static fleet), values decreasing
        self._hours: deque[tuple[int, float]] = deque()
        self._cur = 0.0  # the current hour's, as of ``_cur_at``
        self._cur_at = -np.inf
        self._cur_max = 0.0  # the largest requirement of the current hour (the estimate's ceiling)

    def record(self, now_s: float, requirement: float, requests: float) -> None:
        """One decision period ending at ``now_s``: its requirement (replicas) and the requests it brought."""
        if self._origin is None:
            self._origin = now_s
        hour = int((now_s - self._origin) // self.hour_s)
        if hour != self._hour:
            if self._req:
                self._finish(self._hour, self._quantile())
            self._hour, self._req, self._n = hour, [], []
            self._cur, self._cur_at, self._cur_max = 0.0, -np.inf, 0.0
            self._forget(hour)
        if requests > 0:
            r = max(0.0, requirement)
            self._req.append(r)
            self._n.append(requests)
            if r > self._cur_max:
                self._cur_max = r
                self._cur_at = -np.inf  # a new high of the hour: re-read it now

    def _finish(self, hour: int, value: float) -> None:
        """A finished hour's static fleet: the running max, or (with a memory) a sliding max over hours."""
        if self.memory_hours is None:
            self._best = max(self._best, value)
            return
        hours = self._hours
        while hours and hours[-1][1] <= value:
            hours.pop()
        hours.append((hour, value))
        self._best = hours[0][1]

    def _forget(self, hour: int) -> None:
        """Drop the finished hours older than the memory (the current hour is ``hour``)."""
        if self.memory_hours is None:
            return
        hours = self._hours
        while hours and hours[0][0] < hour - self.memory_hours:
            hours.popleft()
        self._best = hours[0][1] if hours else 0.0

    def level(self, now_s: float) -> float:
        """Replicas of the static fleet the traffic seen so far (within the memory) needs (0 before any request)."""
        if self._req and now_s - self._cur_at >= self.refresh_s:
            self._cur, self._cur_at = self._quantile(), now_s
        return max(self._best, self._cur)

    def _quantile(self) -> float:
        """The request-weighted ``attainment`` quantile of the hour's requirements (a stable argsort, a cumulative
        sum, a left search). An hour of a few periods (the simulator's 15-minute ticks) runs it in plain Python,
        the same numbers (the same stable order, the sum in the same order): numpy's per-call overhead does not
        pay for four values."""
        req, n = self._req, self._n
        if len(req) > _SMALL_HOUR:
            a = np.asarray(req)
            order_a = np.argsort(a, kind="stable")
            cum_a = np.cumsum(np.asarray(n)[order_a])
            k = int(np.searchsorted(cum_a, self.attainment * cum_a[-1] - 1e-9))
            return float(a[order_a][min(k, len(req) - 1)])
        order = sorted(range(len(req)), key=req.__getitem__)  # stable, as np.argsort(kind="stable")
        cum: list[float] = []
        acc = 0.0
        for i in order:
            acc += n[i]
            cum.append(acc)
        k = bisect_left(cum, self.attainment * acc - 1e-9)  # np.searchsorted(cum, ..., side="left")
        return float(req[order[min(k, len(req) - 1)]])
