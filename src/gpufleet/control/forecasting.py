"""The forecasting stage as the service's worlds ask for it: daily demand quantiles from a measured history,
the accuracy of the forecasts served, and the scale each is scored against.

:func:`demand_quantiles` is the engine's one call (:func:`gpufleet.forecast.loop.forecast_demand`, the same the
simulator's control loop runs); with fewer than ``MIN_FIT_DAYS`` observed days it cannot fit and the shared
baseline :class:`gpufleet.forecast.seasonal_naive.SeasonalNaive` answers (zeros without any history).
:func:`band_coverage` is the share of the last 7 observed days inside the p10..p90 band when forecast from the
days before them (None with fewer than 21 days). :func:`score_forecasts` scores stored forecasts on the days
that have fully elapsed (:mod:`gpufleet.forecast.tracking`); a stored forecast is the forecast package's
:class:`~gpufleet.forecast.tracking.IssuedForecast` (one noun for a forecast as issued, re-exported here). No clock, no I/O: the caller passes ``now_s``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.forecast.engine import check_no_infinity
from gpufleet.forecast.loop import forecast_demand
from gpufleet.forecast.metrics import seasonal_naive_scale
from gpufleet.forecast.seasonal_naive import SeasonalNaive
from gpufleet.forecast.tracking import AccuracyTracker, IssuedForecast

__all__ = [
    "BASELINE_METHOD",
    "LEVELS",
    "IssuedForecast",
    "band_coverage",
    "demand_quantiles",
    "mase_scale",
    "score_forecasts",
]

DAY_S = 86400
SEASON_DAYS = 7
LEVELS = (0.1, 0.5, 0.9)
MIN_FIT_DAYS = 3
BASELINE_METHOD = "seasonal_naive_7d_empirical_quantiles"
_BASELINE = SeasonalNaive(season_s=SEASON_DAYS * DAY_S, quantiles=LEVELS)


def demand_quantiles(y: npt.NDArray[np.float64], h: int) -> tuple[npt.NDArray[np.float64], str]:
    """Forecast ``h`` days of the daily series ``y``: array (h, 3) of the p10, p50, p90, and the method. NaN is a
    missing day; an infinite one is refused (ValidationError naming ``history``)."""
    check_no_infinity(np.asarray(y, dtype=np.float64).ravel())
    if int(np.isfinite(y).sum()) >= MIN_FIT_DAYS:
        fc = forecast_demand(y, h, step_s=DAY_S, quantiles=LEVELS)
        band = np.stack([fc.at(q) for q in LEVELS], axis=1)
        return np.clip(band, 0.0, None), fc.method
    base = _BASELINE.forecast(y, DAY_S, h)
    return np.stack([base.quantiles[q] for q in LEVELS], axis=1), BASELINE_METHOD


def band_coverage(y: npt.NDArray[np.float64]) -> float | None:
    """Share of the last 7 days of ``y`` inside the p10..p90 band forecast from the days before them."""
    if y.size < 21:
        return None
    train, test = y[:-7], y[-7:]
    band, _ = demand_quantiles(train, 7)
    inside = (test >= band[:, 0] - 1e-9) & (test <= band[:, 2] + 1e-9)
    return round(float(inside.mean()), 3)


def mase_scale(history: npt.NDArray[np.float64]) -> float:
    """The scale a forecast issued after ``history`` (daily) is scored against: the in-sample seasonal naive
    (7-day) MAE, fixed at issue time; 1.0 without history."""
    return float(seasonal_naive_scale(np.asarray(history, dtype=np.float64), SEASON_DAYS)) if history.size else 1.0


def score_forecasts(
    stored: Sequence[IssuedForecast], actuals: Mapping[str, Mapping[int, float]], now_s: int
) -> tuple[AccuracyTracker, dict[str, int]]:
    """Score every stored forecast (:class:`~gpufleet.forecast.tracking.IssuedForecast`, e.g. built with
    ``IssuedForecast.of_quantiles`` from a store's quantile rows) on its steps that have fully elapsed by ``now_s`` and have an actual (a step
    without one is missing, not zero). Returns the tracker (``history`` per series, ``summary``) and, per
    series, how many forecasts are still pending (no elapsed step with an actual). MASE uses the p50."""
    tracker = AccuracyTracker()
    pending: dict[str, int] = {}
    for r in stored:
        n = min(r.forecast.horizon, max(0, (now_s - r.start_s) // r.step_s))
        grid = [r.start_s + k * r.step_s for k in range(n)]
        obs = actuals.get(r.series_id, {})
        if n == 0 or not any(t in obs for t in grid):
            pending[r.series_id] = pending.get(r.series_id, 0) + 1
            continue
        tracker.record(r.first_steps(n))
    # all actuals first, then one scoring pass (observe() scores every pending forecast it can)
    tracker.actuals = {series: dict(obs) for series, obs in actuals.items()}
    tracker.observe("", [], [], now_s)
    return tracker, pending
