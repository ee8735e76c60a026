"""The loop's forecaster (issue 15): one object, calibrated (issue 21), its fits reused across calls."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.control.loop import ControlLoop
from gpufleet.domain.errors import ValidationError
from gpufleet.forecast import forecast_demand
from gpufleet.forecast.conformal import ForecastMemo
from gpufleet.forecast.engine import GpufleetForecaster, check_history
from gpufleet.ports import DemandForecast


def _hourly(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = np.arange(n)
    return np.asarray(
        500 + 100 * np.sin(2 * np.pi * k / 24) + 30 * np.sin(2 * np.pi * k / 168) + rng.normal(0, 20, n),
        dtype=np.float64,
    )


def test_the_gpufleet_loop_runs_the_calibrated_forecaster() -> None:
    loop = ControlLoop.gpufleet(seed=1)
    assert isinstance(loop.forecaster, GpufleetForecaster)
    y = _hourly(24 * 35)
    fc = loop.forecaster.forecast(y, 3600, 168)
    assert isinstance(fc, DemandForecast) and fc.levels == (0.1, 0.5, 0.9) and fc.values.shape == (3, 168)
    cal = loop.forecaster.last_
    assert cal is not None and cal.reason_ in ("default_most_accurate", "lowest_tracked_pinball")
    assert fc.method == f"gpufleet:{cal.chosen_}" and cal.factors_.shape == (3, 168)
    lo, hi = cal.tail_factors_  # adaptive conformal tails: one multiplier below the median, one above
    np.testing.assert_array_equal(cal.factors_, np.array([[lo], [1.0], [hi]]) * np.ones((1, 168)))
    assert 0.25 <= min(lo, hi) <= max(lo, hi) <= 4.0


def test_weekly_calls_reuse_earlier_fits_and_forecast_exactly_as_a_fresh_forecaster() -> None:
    y = _hourly(24 * 7 * 8)
    g = GpufleetForecaster()
    memo = g.memo
    assert memo is not None
    for week in range(1, 8):
        g.forecast(y[: week * 168], 3600, 168)
    before = (memo.hits, memo.misses)
    fc = g.forecast(y, 3600, 168)
    # one new fit per candidate (3) at the new origin; the 4 tracked windows of each candidate are memo hits, and
    # so are the 3 older windows (of 8; the 8th would start before two days of history) of the chosen model that
    # the adaptive conformal tails also read
    assert memo.misses - before[1] == 3 and memo.hits - before[0] == 12 + 3
    fresh = GpufleetForecaster(memo_size=0).forecast(y, 3600, 168)  # no reuse: every fit made afresh
    assert fresh.method == fc.method
    np.testing.assert_allclose(fc.values, fresh.values)


def test_memo_is_bounded_and_keyed_by_the_data_seen() -> None:
    memo = ForecastMemo(size=2)
    a, b = np.arange(10.0), np.arange(10.0) + 1
    ka, kb = ForecastMemo.key("t", "m", a, 3, (0.5,)), ForecastMemo.key("t", "m", b, 3, (0.5,))
    assert ka != kb and ka == ForecastMemo.key("t", "m", a.copy(), 3, (0.5,))
    fc = DemandForecast(np.zeros(3), (0.5,), np.zeros((1, 3)), "x")
    memo.put(ka, fc)
    memo.put(kb, fc)
    memo.put(ForecastMemo.key("t", "m", a, 4, (0.5,)), fc)
    assert len(memo) == 2 and memo.get(ka) is None and memo.get(kb) is fc
    with pytest.raises(ValidationError, match="memo_size"):
        ForecastMemo(0)


def test_forecast_demand_is_the_loop_forecaster() -> None:
    y = _hourly(24 * 30, seed=3)
    a = forecast_demand(y, 24, step_s=3600, quantiles=(0.1, 0.5, 0.9))
    b = GpufleetForecaster().forecast(y, 3600, 24)
    np.testing.assert_allclose(a.values, b.values)
    assert a.method == b.method and a.method.startswith("gpufleet:")


def test_bad_history_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="3 known points"):
        check_history(np.array([1.0, np.nan]))
    with pytest.raises(ValidationError, match=">= 0"):
        check_history(np.array([1.0, -2.0, 3.0]))
    with pytest.raises(ValidationError, match="horizon"):
        GpufleetForecaster().forecast(np.ones(10), 3600, 0)
    zeros = GpufleetForecaster().forecast(np.array([np.nan, 1.0]), 3600, 5)
    assert zeros.method == "zeros" and np.all(zeros.values == 0)


def test_vectorised_window_losses_equal_the_pinball_loss_of_each_window_and_factor() -> None:
    from gpufleet.forecast.conformal import FACTORS, _pinball, spread_factors, window_losses

    rng = np.random.default_rng(5)
    qs = (0.1, 0.5, 0.9)
    rows = []
    for _ in range(4):
        c = rng.normal(1.0, 0.1, 24)
        sp = np.stack([-rng.uniform(0.05, 0.2, 24), np.zeros(24), rng.uniform(0.05, 0.2, 24)])
        a = c + rng.normal(0, 0.2, 24)
        a[rng.uniform(size=24) < 0.2] = np.nan  # gaps are not scored
        rows.append((c, sp, a))
    rows[3] = (rows[3][0], rows[3][1], np.full(24, np.nan))  # a window of gaps only
    tab = window_losses(rows, qs, 0, 24, FACTORS)
    for w, (c, sp, a) in enumerate(rows):
        for k, f in enumerate(FACTORS):
            expect = _pinball(a, c[None, :] + f * sp, qs)
            assert (np.isnan(expect) and np.isnan(tab[w, k])) or np.isclose(tab[w, k], expect)
    means = [np.mean([_pinball(a, c[None, :] + f * sp, qs) for c, sp, a in rows[:3]]) for f in FACTORS]
    assert spread_factors(rows, qs, [(0, 24)])[0] == FACTORS[int(np.argmin(means))]
