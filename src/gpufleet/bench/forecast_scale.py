"""Forecast speed benchmark: many short daily series, one long horizon (the planning case).

Synthetic series from a seeded generator (level, weekly cycle, trend, noise; a fifth of them intermittent) so the
run needs no data files. Reports total wall seconds of fit + predict for all series, after a warm-up forecast
whose seconds (imports, first-call costs) are reported separately.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpufleet.forecast.loop import DAY_S, forecast_demand
from gpufleet.forecast.quantiles import FloatArray


def synthetic_daily(n_series: int, points: int, rng: np.random.Generator) -> list[FloatArray]:
    out = []
    t = np.arange(points)
    for i in range(n_series):
        if i % 5 == 4:
            occur = rng.uniform(size=points) < rng.uniform(0.1, 0.5)
            out.append(np.where(occur, rng.gamma(2.0, rng.uniform(8, 64), size=points).round(), 0.0))
            continue
        level = rng.uniform(10, 1000)
        weekly = 1 + rng.uniform(0, 0.3) * np.sin(2 * np.pi * t / 7 + rng.uniform(0, 6.3))
        trend = 1 + rng.normal(0, 0.005) * t
        noise = rng.normal(1, rng.uniform(0.02, 0.2), size=points)
        out.append(np.maximum(level * weekly * trend * noise, 0.0))
    return out


@dataclass(frozen=True, slots=True)
class ScaleResult:
    n_series: int
    points: int
    horizon: int
    warmup_s: float
    total_s: float

    @property
    def per_series_ms(self) -> float:
        return 1000 * self.total_s / max(1, self.n_series)


def run_forecast_scale(
    n_series: int = 1000,
    points: int = 60,
    horizon: int = 90,
    *,
    seed: int = 7,
    clock: Callable[[], float] = time.perf_counter,
) -> ScaleResult:
    series = synthetic_daily(n_series, points, np.random.default_rng(seed))
    t0 = clock()
    forecast_demand(series[0], horizon, step_s=DAY_S)
    warm = clock() - t0
    t0 = clock()
    for y in series:
        forecast_demand(y, horizon, step_s=DAY_S)
    return ScaleResult(n_series, points, horizon, warm, clock() - t0)
