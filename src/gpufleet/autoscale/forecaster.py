"""A light online forecaster of a load signal (request rate, concurrency), behind a small interface.

The replica autoscaler needs one number: an upper quantile of the highest load over the next ``horizon_s``
(the cold-start lead plus one decision period), so that replicas launched now are ready before a ramp.
The serving forecast engine (gpufleet.forecast) can replace this class through :class:`LoadForecaster`.

Model (all online, O(1) amortized per bucket, no fitting offline):
  * the signal is bucketed (``bucket_s``); the *level* is the mean of the last ``level_window_s``;
  * two point forecasts compete: the level, and the level times the seasonal growth seen one season ago
    (mean of the season-ago future window / mean of the season-ago level window);
  * for each, the residual ``log((future_max + floor) / (point + floor))`` is recorded once the future is known;
  * the upper forecast is ``(point + floor) * exp(q-quantile of recent residuals) - floor`` for the candidate
    whose residual quantile is tighter. ``floor`` keeps the residual scale-free at high load and additive near 0.
Before ``min_residuals`` residuals exist, a conservative ratio ``warmup_ratio`` is used.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

import numpy as np

from gpufleet.domain.errors import ValidationError


class LoadForecaster(Protocol):
    """What the replica autoscaler needs from a forecaster."""

    def observe(self, now_s: float, value: float, duration_s: float) -> None:
        """Record that the signal averaged ``value`` over ``(now_s - duration_s, now_s]``."""

    def upper(self) -> float:
        """Upper-quantile forecast of the maximum bucket value over the next ``horizon_s``."""

    def level(self) -> float:
        """Mean of the recent signal (the point nowcast)."""


class OnlineQuantileForecaster:
    """Level + seasonal-growth point forecasts with online empirical upper quantiles (see module doc)."""

    def __init__(
        self,
        *,
        horizon_s: float,
        floor: float,
        bucket_s: float = 10.0,
        level_window_s: float = 60.0,
        season_s: float = 86_400.0,
        quantile: float = 0.99,
        residual_window: int = 8_640,
        min_residuals: int = 30,
        warmup_ratio: float = 2.0,
        refresh_buckets: int = 30,
    ) -> None:
        if horizon_s <= 0 or bucket_s <= 0 or floor <= 0:
            raise ValidationError("forecaster", "horizon_s, bucket_s and floor must be > 0")
        if not 0.5 <= quantile < 1.0:
            raise ValidationError("quantile", f"must be in [0.5, 1), got {quantile}")
        self.bucket_s = bucket_s
        self.horizon_b = max(1, math.ceil(horizon_s / bucket_s))
        self.level_b = max(1, round(level_window_s / bucket_s))
        self.season_b = max(1, round(season_s / bucket_s))
        self.floor = floor
        self.quantile = quantile
        self.min_residuals = min_residuals
        self.refresh_buckets = refresh_buckets
        self._warm_log = math.log(warmup_ratio)
        self._hist: list[float] = []  # completed bucket means
        self._acc_value_s = 0.0
        self._acc_s = 0.0
        self._bucket_end_s: float | None = None
        # per candidate: pending (due bucket index, point forecast) and recent residuals
        self._pending: tuple[deque[tuple[int, float]], ...] = (deque(), deque())
        self._resid: tuple[deque[float], ...] = (deque(maxlen=residual_window), deque(maxlen=residual_window))
        self._q_log = [self._warm_log, self._warm_log]
        self._since_refresh = 0
        self._upper = 0.0
        self._level = 0.0

    # -- interface -------------------------------------------------------------------------------------
    def observe(self, now_s: float, value: float, duration_s: float) -> None:
        if self._bucket_end_s is None:
            self._bucket_end_s = now_s - duration_s + self.bucket_s
        self._acc_value_s += value * duration_s
        self._acc_s += duration_s
        while now_s >= self._bucket_end_s - 1e-9:
            mean = self._acc_value_s / self._acc_s if self._acc_s > 0 else 0.0
            self._close_bucket(mean)
            self._acc_value_s = 0.0
            self._acc_s = 0.0
            self._bucket_end_s += self.bucket_s

    def upper(self) -> float:
        return self._upper

    def level(self) -> float:
        return self._level

    # -- internals -------------------------------------------------------------------------------------
    def _close_bucket(self, mean: float) -> None:
        h = self._hist
        h.append(mean)
        n = len(h)
        # residuals of forecasts whose future window just completed
        for c in (0, 1):
            pend = self._pending[c]
            while pend and pend[0][0] <= n:
                due, point = pend.popleft()
                fut_max = max(h[due - self.horizon_b : due])
                self._resid[c].append(math.log((fut_max + self.floor) / (point + self.floor)))
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_buckets or n <= self.min_residuals + self.horizon_b:
            self._refresh_quantiles()
        level = float(np.mean(h[-self.level_b :]))
        self._level = level
        points = (level, level * self._seasonal_growth(n))
        for c in (0, 1):
            self._pending[c].append((n + self.horizon_b, points[c]))
        best = 0 if self._q_log[0] <= self._q_log[1] else 1
        self._upper = max(0.0, (points[best] + self.floor) * math.exp(self._q_log[best]) - self.floor)

    def _seasonal_growth(self, n: int) -> float:
        s, lb, hb = self.season_b, self.level_b, self.horizon_b
        if n - s - lb < 0:
            return 1.0
        past = self._hist[n - s - lb : n - s]
        fut = self._hist[n - s : n - s + hb]
        p = float(np.mean(past)) + self.floor
        f = float(np.mean(fut)) + self.floor
        return min(2.0, max(0.5, f / p))

    def _refresh_quantiles(self) -> None:
        self._since_refresh = 0
        for c in (0, 1):
            r = self._resid[c]
            if len(r) >= self.min_residuals:
                self._q_log[c] = max(0.0, float(np.quantile(np.fromiter(r, float, len(r)), self.quantile)))
            else:
                self._q_log[c] = self._warm_log
        if len(self._hist) < self.season_b:
            self._q_log[1] = math.inf  # no season seen yet: the seasonal candidate cannot win
