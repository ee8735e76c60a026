"""Regression guard for the disagreement widening: on ServeGen's m-large, whose last test day is a level jump, the
80% band held only 0.67 of the points before it (docs/benchmarks/forecast.md)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from gpufleet.adapters.traces import read_series_csv
from gpufleet.forecast import AutoForecaster, seasons_for_step
from gpufleet.forecast.backtest import backtest


def test_m_large_band_holds_the_level_jump(shared_data: Path) -> None:
    s = read_series_csv(shared_data / "serving" / "servegen_rate_10min.csv")["m-large"]
    seasons = seasons_for_step(s.step_s)
    score = backtest(s.values, lambda: AutoForecaster(seasons), 144, 144, time.perf_counter, n_origins=4)
    assert 0.75 <= score.coverage_80 <= 0.90
    assert np.isfinite(score.pinball)
