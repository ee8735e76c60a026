"""Benchmark plumbing: durations, horizons, request logs to rates, backtest windows, the verdict."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from gpufleet.bench.forecast import horizon_steps, parse_duration_s, request_rate_series, verdict
from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.backtest import BacktestScore, backtest, rolling_origins
from gpufleet.forecast.baselines import levels_for, seasonal_naive


def test_durations_and_horizons() -> None:
    assert parse_duration_s("1d") == 86_400
    assert parse_duration_s("10min") == 600
    assert parse_duration_s("24h") == 86_400
    assert horizon_steps("1d", 600) == 144
    assert horizon_steps("36", 3600) == 36
    with pytest.raises(ValidationError):
        horizon_steps("90min", 3600)
    with pytest.raises(ValidationError):
        parse_duration_s("tomorrow")


def test_rolling_origins_are_back_to_back_and_need_history() -> None:
    assert rolling_origins(100, 10, 4, min_train=20) == [60, 70, 80, 90]
    with pytest.raises(ValidationError):
        rolling_origins(50, 10, 4, min_train=20)


def test_request_log_becomes_a_rate(tmp_path: Path) -> None:
    log = tmp_path / "req.csv"
    log.write_text("gmt_create,kind\n2024-01-01 00:10:00,a\n2024-01-01 00:20:00,a\n2024-01-01 02:05:00,b\n")
    out = request_rate_series(log, "gmt_create", 3600, "kind")
    assert list(out) == ["all", "kind=a", "kind=b"]
    assert out["all"].values * 3600 == pytest.approx([2, 0, 1])
    assert out["kind=b"].values * 3600 == pytest.approx([0, 0, 1])
    with pytest.raises(ValidationError):
        request_rate_series(log, "nope", 3600)


def test_backtest_excludes_gap_actuals_from_scores() -> None:
    y = np.tile(np.arange(1.0, 25.0), 10)  # a perfect daily pattern
    y[-30:-20] = 0.0  # an outage in the last window
    score = backtest(y, lambda: seasonal_naive(24), 24, 24, time.perf_counter, n_origins=4)
    assert score.n_scored == 4 * 24 - 10
    assert score.mase == pytest.approx(0.0, abs=1e-9)


def test_statsforecast_levels_for_symmetric_quantiles() -> None:
    assert levels_for((0.1, 0.2, 0.5, 0.8, 0.9)) == [60, 80]


def test_verdict_compares_with_the_best_baseline() -> None:
    def s(m: float, p: float, c: float) -> BacktestScore:
        return BacktestScore(m, p, c, 0.0, 4, 96)

    v = verdict({"gpufleet": s(0.9, 0.40, 0.8), "naive": s(1.0, 0.50, 0.9), "mstl": s(0.95, 0.45, 0.7)})
    assert v["best_pinball_baseline"] == "mstl" and v["pinball_ratio"] == pytest.approx(0.40 / 0.45)
    assert v["mase_ok"] and v["coverage_ok"] and v["pinball_ok"]
