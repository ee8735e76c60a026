"""Baseline forecaster: seasonal naive with empirical quantiles of the seasonal errors."""

from __future__ import annotations

import numpy as np

from gpufleet.ports import DemandForecast, FloatArray

DEFAULT_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)


class SeasonalNaive:
    """Repeat the last season; quantiles from the in-sample distribution of seasonal differences.

    ``season_s`` is the season length in seconds (a week by default, a day when history is shorter). The history is
    a regular grid where NaN marks a gap: a gap in the last season takes the same phase's latest value before it
    (else the history's median), so the season stays aligned; the errors are over the pairs both observed.
    """

    def __init__(self, season_s: int = 7 * 86400, quantiles: tuple[float, ...] = DEFAULT_QUANTILES) -> None:
        self.season_s = season_s
        self.quantiles = quantiles

    def forecast(self, history: FloatArray, step_s: int, horizon: int) -> DemandForecast:
        h = np.asarray(history, dtype=np.float64)
        if len(h) == 0 or np.isnan(h).all():
            levels = tuple(sorted(self.quantiles))
            return DemandForecast(np.zeros(horizon), levels, np.zeros((len(levels), horizon)), "seasonal_naive")
        m = max(1, self.season_s // step_s)
        if len(h) < 2 * m:
            m = max(1, min(86400 // step_s, len(h) // 2)) or 1
        m = min(m, len(h))
        last = _last_season(h, m)
        reps = int(np.ceil(horizon / m))
        point = np.tile(last, reps)[:horizon]
        diffs = h[m:] - h[:-m] if len(h) > m else np.zeros(1)
        errs = diffs[~np.isnan(diffs)]
        if len(errs) == 0:
            errs = np.zeros(1)
        out: dict[float, FloatArray] = {}
        for q in sorted(self.quantiles):
            out[q] = np.maximum(point + float(np.quantile(errs, q)) if q != 0.5 else point, 0.0)
        # quantiles must not cross: enforce monotonicity across sorted levels
        prev: FloatArray | None = None
        for q in sorted(out):
            if prev is not None:
                out[q] = np.maximum(out[q], prev)
            prev = out[q]
        levels = tuple(sorted(out))
        return DemandForecast(np.maximum(point, 0.0), levels, np.stack([out[q] for q in levels]), "seasonal_naive")


def _last_season(h: FloatArray, m: int) -> FloatArray:
    """The last ``m`` steps, each gap (NaN) filled from the same phase one season earlier, and so on back; a phase
    never observed takes the history's median."""
    last = h[-m:].copy()
    for i in np.flatnonzero(np.isnan(last)):
        back = h[len(h) - m + i :: -m]
        seen = back[~np.isnan(back)]
        last[i] = seen[0] if len(seen) else float(np.nanmedian(h))
    return last
