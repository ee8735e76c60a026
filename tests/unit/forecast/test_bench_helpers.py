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


def test_verdict_on_a_flat_series_where_a_baseline_is_exact() -> None:
    # a baseline with zero error divided by zero before (a flat series crashed `bench forecast`)
    def s(m: float, p: float) -> BacktestScore:
        return BacktestScore(m, p, 1.0, 0.0, 4, 96)

    tie = verdict({"gpufleet": s(0.0, 0.0), "naive": s(0.0, 0.0)})
    assert tie["pinball_ratio"] == 1.0 and tie["mase_ratio"] == 1.0 and not tie["pinball_ok"]
    worse = verdict({"gpufleet": s(0.1, 0.05), "naive": s(0.0, 0.0)})
    assert worse["pinball_ratio"] == float("inf") and not worse["mase_ok"]


def test_per_origin_scores_add_up_to_the_aggregate() -> None:
    rng = np.random.default_rng(3)
    y = np.tile(10 + 5 * np.sin(np.arange(24) * 2 * np.pi / 24), 12) + rng.normal(0, 1, 288)
    score = backtest(y, lambda: seasonal_naive(24), 24, 24, time.perf_counter, n_origins=4)
    assert [w.origin for w in score.per_origin] == [192, 216, 240, 264]
    assert np.mean([w.mase for w in score.per_origin]) == pytest.approx(score.mase)
    assert np.mean([w.pinball for w in score.per_origin]) == pytest.approx(score.pinball)
    pooled = sum(w.coverage_80 * w.n_scored for w in score.per_origin) / score.n_scored
    assert pooled == pytest.approx(score.coverage_80)


def test_per_origin_table_names_each_window_and_its_best_model() -> None:
    from gpufleet.bench.forecast import ForecastBenchResult, per_origin_table
    from gpufleet.forecast.backtest import OriginScore

    def s(pins: list[float]) -> BacktestScore:
        wins = tuple(OriginScore(48 + 24 * i, 1.0, p, 0.8, 24) for i, p in enumerate(pins))
        return BacktestScore(1.0, float(np.mean(pins)), 0.8, 0.0, len(pins), 24 * len(pins), wins)

    res = ForecastBenchResult(horizon=24, step_s=3600, n_origins=2, t0_s={"x": 0})
    res.scores["x"] = {"gpufleet": s([0.2, 0.9]), "mstl": s([0.3, 0.5])}
    rows = [line for line in per_origin_table(res).splitlines() if line.startswith("| 1970")]
    assert rows[0].startswith("| 1970-01-03 00:00 | 0.200 / 1.00 / 0.80") and rows[0].endswith("| gpufleet |")
    assert rows[1].startswith("| 1970-01-04 00:00") and rows[1].endswith("| mstl |")
    per = res.to_json(per_origin=True)["series"]["x"]["mstl"]["per_origin"]
    assert [w["start_s"] for w in per] == [2 * 86_400, 3 * 86_400] and per[1]["pinball"] == 0.5
    assert "per_origin" not in res.to_json()["series"]["x"]["mstl"]


def test_a_band_equal_to_the_truth_up_to_rounding_covers_it() -> None:
    from gpufleet.forecast.metrics import coverage

    truth = np.full(5, 100.0)
    assert coverage(truth, truth + 1e-12, truth + 2e-12) == 1.0  # a flat series forecast as itself
    assert coverage(truth, truth + 1e-3, truth + 2e-3) == 0.0  # a real miss stays a miss
    flat = np.full(24 * 10, 100.0)
    score = backtest(flat, lambda: seasonal_naive(24), 24, 24, time.perf_counter, n_origins=2)
    assert score.coverage_80 == 1.0


def test_coverage_before_scores_the_days_before_the_test_days_only() -> None:
    from gpufleet.adapters.traces import Series
    from gpufleet.bench.forecast import coverage_before

    rng = np.random.default_rng(5)
    n = 24 * 12
    y = 50 + 20 * np.sin(2 * np.pi * np.arange(n) / 24) + rng.normal(0, 2, n)
    s = Series("s", 3600 * np.arange(n, dtype=np.int64), y)
    cov, days = coverage_before(s, "1d", days=3)
    assert days == 3 and 0.0 <= cov <= 1.0
    # 12 days: 4 test days, 2 of training at least, so at most 6 days before the test days
    assert coverage_before(s, "1d", days=20)[1] == 6
    # the test days' values never enter: wrecking them leaves the figure as it was
    wrecked = Series("s", s.t_s, np.concatenate([y[: n - 96], np.full(96, 1e6)]))
    assert coverage_before(wrecked, "1d", days=3) == (cov, days)
    short = Series("s", s.t_s[:100], y[:100])
    cov_short, days_short = coverage_before(short, "1d")
    assert days_short == 0 and np.isnan(cov_short)


def test_protocol_points_are_the_test_windows_and_two_days_of_training() -> None:
    from gpufleet.bench.forecast import protocol_points

    assert protocol_points(3600, "1d") == 4 * 24 + 2 * 24
    assert protocol_points(600, "1d", n_origins=5) == 5 * 144 + 2 * 144
    y = np.arange(protocol_points(3600, "1d"), dtype=float)
    assert rolling_origins(len(y), 24, 4, min_train=48)[0] == 48  # exactly enough
    with pytest.raises(ValidationError):
        rolling_origins(len(y) - 1, 24, 4, min_train=48)
