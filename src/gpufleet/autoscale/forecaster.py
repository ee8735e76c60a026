"""A light online forecaster of a load signal (request rate, concurrency), behind a small interface.

The replica autoscaler needs one number: an upper quantile of the highest load over the next ``horizon_s``
(the cold-start lead plus one decision period), so that replicas launched now are ready before a ramp.
The serving forecast engine (gpufleet.forecast) can replace this class through :class:`LoadForecaster`.

Model (online, O(1) amortized per bucket, nothing fitted offline):
  * the signal is bucketed (``bucket_s``); the *level* is the mean of the last ``level_window_s``;
  * three point forecasts compete: the level; the level times the seasonal growth (median over the last
    ``max_seasons`` seasons of: max of the season-ago future window / mean of the season-ago level window);
    and the *recent peak* (highest bucket of the last ``slow_window_s``, which suits on/off bursty traffic);
  * for each, the residual ``log((future_max + floor) / (point + floor))`` is recorded once the future is
    known, in one of a few bins of the *deviation* of the level from the slow level (mean of
    ``slow_window_s``): a level below its slow level tends to rise, one above it tends to fall, so the upper
    quantile conditioned on the deviation is tighter than a pooled one (a thin bin uses the pooled quantile);
  * each candidate's upper forecast is ``(point + floor) * exp(q-quantile of its residuals) - floor``, i.e.
    calibrated on its own recent errors; the level and the recent peak also come with an *additive* residual
    model (``(future_max - point) / floor``, upper ``point + q * floor``), which fits on/off bursty traffic
    whose bursts do not scale with the level; the forecaster reports the candidate with the lowest recent
    quantile (pinball) loss at level ``quantile`` (EWMA, in log space), a proper score for an upper quantile;
    the EWMA is read as a mean (divided by the same EWMA of 1, as Adam corrects its moments): started at 0, it
    is otherwise about a sum for a candidate scored for less than its half-life, and a candidate that matures
    late (the seasonal one, after a day) would win on having fewer scores;
  * a recurring ramp is never ignored: when the seasonal growth is above 1, the upper forecast is at least
    the seasonal point forecast.
``floor`` keeps residuals scale-free at high load and additive near 0. Before ``min_residuals`` residuals
exist, the upper forecast is ``warmup_ratio`` times the level (the ratio applies to the load only: on
``(level + floor)`` it would ask a quiet fleet for a whole replica more than its load, for the first
``min_residuals`` buckets of every trace). The replica autoscaler passes its ``peak_headroom`` (1.2): sized at its
hot utilization, that is the level at the target utilization until the forecast's errors are measured.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

import numpy as np

from gpufleet.domain.errors import ValidationError

# candidate forecasts: (point forecast, residual model); points are 0 level, 1 seasonal growth, 2 recent peak
CANDIDATES: tuple[tuple[int, str], ...] = ((0, "log"), (1, "log"), (2, "log"), (0, "add"), (2, "add"))
N_CANDIDATES = len(CANDIDATES)
_ADDITIVE = tuple(kind == "add" for _, kind in CANDIDATES)


class LoadForecaster(Protocol):
    """What the replica autoscaler needs from a forecaster."""

    def observe(self, now_s: float, value: float, duration_s: float) -> None:
        """Record that the signal averaged ``value`` over ``(now_s - duration_s, now_s]``."""

    def upper(self) -> float:
        """Upper-quantile forecast of the maximum bucket value over the next ``horizon_s``."""

    def level(self) -> float:
        """Mean of the recent signal (the point nowcast)."""


class _Ring:
    """A fixed-size ring of floats in a numpy array (the recent residuals), with a fast upper quantile."""

    __slots__ = ("_last", "buf", "n", "pos", "size")

    def __init__(self, size: int) -> None:
        self.buf = np.empty(size)
        self.size = size
        self.n = 0
        self.pos = 0
        self._last: tuple[float, float] | None = None  # (q, quantile) while nothing was appended since

    def append(self, x: float) -> None:
        pos = self.pos
        self.buf[pos] = x
        pos += 1
        self.pos = 0 if pos == self.size else pos
        if self.n < self.size:
            self.n += 1
        self._last = None

    def quantile(self, q: float) -> float:
        """Empirical q-quantile (the ceil(q * n)-th smallest value), by partition, O(n); kept until the next
        append (a bin that saw no residual since the last refresh is not partitioned again)."""
        last = self._last
        if last is not None and last[0] == q:
            return last[1]
        k = min(self.n - 1, max(0, math.ceil(q * self.n) - 1))
        v = float(np.partition(self.buf[: self.n], k)[k])
        self._last = (q, v)
        return v


class OnlineQuantileForecaster:
    """Competing point forecasts with online, deviation-conditioned empirical upper quantiles."""

    def __init__(
        self,
        *,
        horizon_s: float,
        floor: float,
        bucket_s: float = 10.0,
        level_window_s: float = 60.0,
        slow_window_s: float = 1_800.0,
        season_s: float = 86_400.0,
        quantile: float = 0.98,
        deviation_edges: tuple[float, ...] = (-0.1, -0.03, 0.03, 0.1),
        residual_window: int = 8_640,
        min_residuals: int = 30,
        warmup_ratio: float = 2.0,
        refresh_buckets: int = 60,
        loss_halflife_buckets: float = 2_000.0,
        max_seasons: int = 7,
    ) -> None:
        if horizon_s <= 0 or bucket_s <= 0 or floor <= 0:
            raise ValidationError("forecaster", "horizon_s, bucket_s and floor must be > 0")
        if not 0.5 <= quantile < 1.0:
            raise ValidationError("quantile", f"must be in [0.5, 1), got {quantile}")
        self.bucket_s = bucket_s
        self.horizon_b = max(1, math.ceil(horizon_s / bucket_s))
        self.level_b = max(1, round(level_window_s / bucket_s))
        self.season_b = max(1, round(season_s / bucket_s))
        self.slow_b = max(self.level_b, round(slow_window_s / bucket_s))
        self.edges = deviation_edges
        nbins = len(deviation_edges) + 1
        self.floor = floor
        self.quantile = quantile
        self.min_residuals = min_residuals
        self.refresh_buckets = refresh_buckets
        self._alpha = 1.0 - 0.5 ** (1.0 / loss_halflife_buckets)
        self.max_seasons = max_seasons
        self._warm_log = math.log(warmup_ratio)
        self._warm_ratio = warmup_ratio
        self._hist: list[float] = []  # completed bucket means
        self._acc_value_s = 0.0
        self._acc_s = 0.0
        self._bucket_end_s: float | None = None
        nc = N_CANDIDATES
        # per candidate: pending (due bucket index, point forecast, bin, upper); pooled and per-bin residuals
        self._pending: list[deque[tuple[int, float, int, float]]] = [deque() for _ in range(nc)]
        self._resid = [_Ring(residual_window) for _ in range(nc)]
        self._resid_bin = [[_Ring(residual_window) for _ in range(nbins)] for _ in range(nc)]
        # per candidate, what the bucket close reads, unpacked once: (index, pending, pooled ring, bin rings,
        # additive, point forecast); the lists above stay the state (this only holds the same objects)
        self._cands = tuple(
            (c, self._pending[c], self._resid[c], self._resid_bin[c], _ADDITIVE[c], CANDIDATES[c][0]) for c in range(nc)
        )
        self._q_log = [self._warm_log] * nc
        self._q_bin = [[self._warm_log] * nbins for _ in range(nc)]
        self._loss = [0.0] * nc  # EWMA of the pinball loss of each candidate's upper forecast, started at 0
        self._loss_w = [0.0] * nc  # the same EWMA of 1: the loss's weight, to read it as a mean (bias-corrected)
        self._sum_level = 0.0
        self._sum_slow = 0.0
        self._peak: deque[tuple[int, float]] = deque()  # monotonic deque for the recent-peak candidate
        # the seasonal growth's ratio of each bucket index ``at`` (None: not yet computed), kept once its future
        # window is complete: the ratio at ``at`` reads only the (append-only) history around it
        self._ratio_at: list[float | None] = []
        self._since_refresh = 0
        self._upper = 0.0
        self._level = 0.0
        self.chosen = 0

    # -- interface -------------------------------------------------------------------------------------
    def observe(self, now_s: float, value: float, duration_s: float) -> None:
        if self._bucket_end_s is None:
            self._bucket_end_s = now_s - duration_s + self.bucket_s
        start = now_s - duration_s
        while True:  # spread the observation over the buckets it covers
            seg_end = min(now_s, self._bucket_end_s)
            if seg_end > start:
                self._acc_value_s += value * (seg_end - start)
                self._acc_s += seg_end - start
                start = seg_end
            if now_s < self._bucket_end_s - 1e-9:
                break
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
        f = self.floor
        hb = self.horizon_b
        quantile = self.quantile
        below = quantile - 1.0
        alpha = self._alpha
        loss = self._loss
        loss_w = self._loss_w
        log = math.log
        last_due, fut, y = -1, 0.0, 0.0  # the future window's max and its log, shared by the candidates due at once
        for c, pend, ring, bins, additive, _pi in self._cands:  # residuals of forecasts whose window just completed
            if not pend or pend[0][0] > n:
                continue
            while pend and pend[0][0] <= n:
                due, point, b, up = pend.popleft()
                if due != last_due:
                    last_due = due
                    fut = max(h[due - hb : due])
                    y = log(fut + f)
                r = (fut - point) / f if additive else y - log(point + f)
                # ring.append(r) and bins[b].append(r) (_Ring.append), inlined
                pos = ring.pos
                ring.buf[pos] = r
                pos += 1
                ring.pos = 0 if pos == ring.size else pos
                if ring.n < ring.size:
                    ring.n += 1
                ring._last = None
                rb = bins[b]
                pos = rb.pos
                rb.buf[pos] = r
                pos += 1
                rb.pos = 0 if pos == rb.size else pos
                if rb.n < rb.size:
                    rb.n += 1
                rb._last = None
                miss = y - log(up + f)
                pin = quantile * miss if miss > 0 else below * miss
                loss[c] += alpha * (pin - loss[c])
                loss_w[c] += alpha * (1.0 - loss_w[c])
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_buckets or n <= self.min_residuals + hb:
            self._refresh_quantiles()
        # running sums and a monotonic deque keep level, slow level and recent peak O(1) per bucket
        level_b, slow_b = self.level_b, self.slow_b
        self._sum_level += mean - (h[n - 1 - level_b] if n > level_b else 0.0)
        self._sum_slow += mean - (h[n - 1 - slow_b] if n > slow_b else 0.0)
        peak = self._peak
        while peak and peak[-1][1] <= mean:
            peak.pop()
        peak.append((n - 1, mean))
        while peak[0][0] <= n - 1 - slow_b:
            peak.popleft()
        level = self._sum_level / (n if n < level_b else level_b)
        level = level if level > 0.0 else 0.0  # max(0.0, level), NaN and all
        slow = self._sum_slow / (n if n < slow_b else slow_b)
        slow = slow if slow > 0.0 else 0.0
        self._level = level
        dev = log((level + f) / (slow + f))
        b = 0
        for e in self.edges:
            if dev > e:
                b += 1
        growth = self._seasonal_growth(n)
        seasonal = (level + f) * growth - f
        points = (level, seasonal if seasonal > 0.0 else 0.0, peak[0][1])
        # a point forecast is mature once its window is full: before that it is neither scored nor used
        mature = (True, n >= self.season_b + level_b, n >= slow_b)
        q_bin = self._q_bin
        min_residuals = self.min_residuals
        due = n + hb
        best, best_loss, best_up = -1, 0.0, 0.0  # min(usable, key=loss.__getitem__): the first lowest loss
        for c, pend, ring, _bins, additive, pi in self._cands:
            p = points[pi]
            q = q_bin[c][b]
            up = p + q * f if additive else (p + f) * math.exp(q) - f
            if not up > 0.0:  # max(0.0, up)
                up = 0.0
            if mature[pi]:
                pend.append((due, p, b, up))
                if ring.n >= min_residuals:
                    mean_loss = loss[c] / loss_w[c] if loss_w[c] > 0.0 else 0.0
                    if best < 0 or mean_loss < best_loss:
                        best, best_loss, best_up = c, mean_loss, up
        if best < 0:  # none usable yet: the level, times the warm-up ratio (of the load, not of load + floor)
            best, best_up = 0, self._warm_ratio * level
        self.chosen = best
        floor_up = points[1] if growth > 1.0 else 0.0
        self._upper = floor_up if floor_up > best_up else best_up  # max(best_up, floor_up), NaN and all

    def _ratio(self, at: int) -> float:
        """The seasonal growth's ratio at bucket index ``at``: (max of the ``horizon_b`` buckets from ``at`` +
        floor) / (mean of the ``level_b`` buckets before it + floor). Memoised once its future window is
        complete (the history is append-only, so it never changes after)."""
        memo = self._ratio_at
        got = memo[at] if at < len(memo) else None
        if got is not None:
            return got
        h, lb, hb = self._hist, self.level_b, self.horizon_b
        past = h[at - lb : at]
        fut = h[at : at + hb]
        r = (max(fut) + self.floor) / (sum(past) / len(past) + self.floor)
        if at + hb <= len(h):
            if at >= len(memo):
                memo.extend([None] * (at + 1 - len(memo)))
            memo[at] = r
        return r

    def _seasonal_growth(self, n: int) -> float:
        """Median over past seasons of (future-window max / level-window mean), clipped to [0.5, 4]."""
        s, lb = self.season_b, self.level_b
        memo = self._ratio_at
        known = len(memo)
        ratios = []
        for k in range(1, self.max_seasons + 1):
            at = n - k * s
            if at - lb < 0:
                break
            got = memo[at] if at < known else None  # _ratio's memo read inline (one call less per season)
            ratios.append(got if got is not None else self._ratio(at))
        if not ratios:
            return 1.0
        ratios.sort()
        mid = len(ratios) // 2
        med = ratios[mid] if len(ratios) % 2 else 0.5 * (ratios[mid - 1] + ratios[mid])
        return min(4.0, max(0.5, med))

    def _refresh_quantiles(self) -> None:
        self._since_refresh = 0
        for c in range(N_CANDIDATES):
            self._q_log[c] = self._quantile(self._resid[c], self._warm_log)
            self._q_bin[c] = [self._quantile(rb, self._q_log[c]) for rb in self._resid_bin[c]]

    def _quantile(self, r: _Ring, fallback: float) -> float:
        if r.n < self.min_residuals:
            return fallback
        return max(0.0, r.quantile(self.quantile))
