"""The static fleet the SLO needs for the traffic seen so far, estimated causally (issue 21).

``static_peak`` of ``gpufleet bench autoscale`` is the fewest constant replicas that meet the SLO for at least
99% of the requests of *every hour* of a trace; it is sized in hindsight, on the whole trace. This is the same
quantity over the hours seen so far, from what the autoscaler observes: each decision period brings a
*requirement* (the replicas that would have served every request of the intervals ending with it within the SLO:
:meth:`gpufleet.autoscale.burst_hold.BurstFloor.observe`) and a number of requests. An hour's static fleet is
the request-weighted ``attainment`` quantile of its periods' requirements (the fewest replicas at which that share
of the hour's requests would have met the SLO); the estimate is the largest over the hours seen, the current
partial hour included. It never decreases, and it never exceeds the hindsight static fleet by more than the
requirement arithmetic's own error (the fluid bound of a period; for one-request replicas, at most one slot).

Cost: O(periods of the current hour) per refresh; the current hour is re-read at most once per ``refresh_s``.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from gpufleet.domain.errors import ValidationError

_SMALL_HOUR = 32  # periods in an hour up to which :meth:`StaticFleetEstimate._quantile` runs in plain Python


class StaticFleetEstimate:
    """Running max over hours of the request-weighted ``attainment`` quantile of the period requirement."""

    def __init__(self, attainment: float = 0.99, hour_s: float = 3600.0, refresh_s: float = 60.0) -> None:
        if not 0.5 <= attainment <= 1.0:
            raise ValidationError("static_attainment", f"must be in [0.5, 1], got {attainment}")
        if hour_s <= 0 or refresh_s < 0:
            raise ValidationError("static_hour_s", "hour_s must be > 0 and refresh_s >= 0")
        self.attainment = attainment
        self.hour_s = hour_s
        self.refresh_s = refresh_s
        self._origin: float | None = None
        self._hour = -1
        self._req: list[float] = []
        self._n: list[float] = []
        self._best = 0.0  # the largest static fleet of a finished hour
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
                self._best = max(self._best, self._quantile())
            self._hour, self._req, self._n = hour, [], []
            self._cur, self._cur_at, self._cur_max = 0.0, -np.inf, 0.0
        if requests > 0:
            r = max(0.0, requirement)
            self._req.append(r)
            self._n.append(requests)
            if r > self._cur_max:
                self._cur_max = r
                self._cur_at = -np.inf  # a new high of the hour: re-read it now

    def level(self, now_s: float) -> float:
        """Replicas of the static fleet the traffic seen so far needs (0 before any request)."""
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
