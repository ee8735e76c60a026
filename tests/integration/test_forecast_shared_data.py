"""gpufleet on the real ServeGen trace: a quick sanity run (the full comparison is `gpufleet bench forecast`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from gpufleet.adapters.traces import read_series_csv
from gpufleet.forecast import AutoForecaster, seasons_for_step
from gpufleet.forecast.backtest import backtest


def test_servegen_backtest_is_sane(shared_data: Path) -> None:
    s = read_series_csv(shared_data / "serving" / "servegen_rate_10min.csv")["m-mid"]
    seasons = seasons_for_step(s.step_s)
    score = backtest(s.values, lambda: AutoForecaster(seasons), 144, 144, time.perf_counter, n_origins=4)
    assert np.isfinite(score.mase) and score.mase < 2.0
    assert 0.5 <= score.coverage_80 <= 1.0
    assert score.n_scored < 4 * 144  # the zero windows (gaps) were excluded from scoring
