"""Rolling-origin backtests: the last ``n_origins * h`` points of a series are cut into non-overlapping windows;
for each window the model is fitted on everything before it and scored on it.

Gap handling: the history a model sees has gaps as NaN (marked on the history alone, so nothing leaks from the
future); actuals that are gaps (marked on the whole series) are excluded from every metric, for every model.
Per origin: MASE and scaled pinball use the seasonal naive scale of that origin's history; the reported numbers
are means over origins; coverage is pooled over all scored points; ``seconds`` is fit+predict wall time summed
over origins (measured with the clock passed in). ``per_origin`` keeps each window's own scores, so a verdict can
be traced to the days that drive it (one bad day often dominates a 4-origin mean).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.base import ForecastModel
from gpufleet.forecast.gaps import mark_gaps
from gpufleet.forecast.metrics import mase, scaled_pinball, seasonal_naive_scale
from gpufleet.forecast.quantiles import FloatArray

#: Quantile levels scored by the benchmark.
SCORED_QUANTILES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True, slots=True)
class OriginScore:
    """One window's scores; ``origin`` is the index of its first forecast point in the series."""

    origin: int
    mase: float
    pinball: float
    coverage_80: float
    n_scored: int


@dataclass(frozen=True, slots=True)
class BacktestScore:
    mase: float
    pinball: float
    coverage_80: float
    seconds: float
    n_origins: int
    n_scored: int
    per_origin: tuple[OriginScore, ...] = ()


def rolling_origins(n: int, h: int, n_origins: int, min_train: int) -> list[int]:
    """Origins (index of the first forecast point) of ``n_origins`` back-to-back windows ending at ``n``."""
    if h < 1 or n_origins < 1:
        raise ValidationError("horizon", f"need h >= 1 and n_origins >= 1, got {h}, {n_origins}")
    origins = [n - k * h for k in range(n_origins, 0, -1)]
    if origins[0] < min_train:
        raise ValidationError(
            "series", f"{n} points are too few for {n_origins} origins of horizon {h} after {min_train} for training"
        )
    return origins


def backtest(
    y: FloatArray,
    make_model: Callable[[], ForecastModel],
    h: int,
    season: int,
    clock: Callable[[], float],
    n_origins: int = 4,
    gap_window: int | None = None,
) -> BacktestScore:
    """Score a fresh model from ``make_model`` at each rolling origin of ``y`` (see module docstring)."""
    y = np.asarray(y, dtype=np.float64)
    window = gap_window or max(season, 3)
    eval_gaps = mark_gaps(y, window)
    actual_all = np.where(eval_gaps, np.nan, y)
    origins = rolling_origins(len(y), h, n_origins, min_train=max(2 * season, 3))
    mases, pins = [], []
    windows: list[OriginScore] = []
    inside = scored = 0
    seconds = 0.0
    for o in origins:
        hist = y[:o]
        hist = np.where(mark_gaps(hist, window), np.nan, hist)
        t0 = clock()
        fc = make_model().fit(hist).predict(h, SCORED_QUANTILES)
        seconds += clock() - t0
        actual = actual_all[o : o + h]
        if not np.isfinite(actual).any():
            continue
        scale = seasonal_naive_scale(hist, season)
        mases.append(mase(actual, fc.mean, scale))
        pins.append(scaled_pinball(actual, fc.values, SCORED_QUANTILES, scale))
        ok = np.isfinite(actual)
        lo, hi = fc.at(0.1)[ok], fc.at(0.9)[ok]
        a = actual[ok]
        tol = 1e-9 * np.maximum(1.0, np.abs(a))  # a band that is the truth up to rounding (a flat series) holds it
        hits = int(np.sum((a >= lo - tol) & (a <= hi + tol)))
        inside += hits
        scored += int(ok.sum())
        windows.append(OriginScore(o, mases[-1], pins[-1], hits / int(ok.sum()), int(ok.sum())))
    return BacktestScore(
        mase=float(np.mean(mases)) if mases else float("nan"),
        pinball=float(np.mean(pins)) if pins else float("nan"),
        coverage_80=inside / scored if scored else float("nan"),
        seconds=seconds,
        n_origins=len(origins),
        n_scored=scored,
        per_origin=tuple(windows),
    )
