"""Quantiles never cross, whatever the history; edge-case histories give sane output or a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast import AutoForecaster, IntermittentForecaster, ServingForecaster, forecast_demand
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, make_forecast

values = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e6), st.just(float("nan")))


def _assert_sane(fc_values: np.ndarray, mean: np.ndarray) -> None:
    assert np.all(np.isfinite(fc_values)) and np.all(np.isfinite(mean))
    assert np.all(np.diff(fc_values, axis=0) >= 0), "quantiles cross"
    assert np.all(fc_values >= 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    y=arrays(np.float64, st.integers(3, 80), elements=values),
    h=st.integers(1, 30),
    step=st.sampled_from([3600, 86_400]),
)
def test_quantiles_never_cross_for_any_history(y: np.ndarray, h: int, step: int) -> None:
    if np.isfinite(y).sum() < 3:
        with pytest.raises(ValidationError):
            forecast_demand(y, h, step_s=step)
        return
    fc = forecast_demand(y, h, step_s=step)
    assert fc.values.shape == (len(DEFAULT_QUANTILES), h)
    _assert_sane(fc.values, fc.mean)


@settings(max_examples=40, deadline=None)
@given(raw=arrays(np.float64, (5, 7), elements=st.one_of(st.floats(-1e9, 1e9), st.just(float("nan")))))
def test_make_forecast_sorts_any_input(raw: np.ndarray) -> None:
    fc = make_forecast(raw[2], raw, (0.1, 0.3, 0.5, 0.7, 0.9), "t")
    assert np.all(np.diff(fc.values, axis=0) >= 0)
    assert np.all(np.isfinite(fc.values))


def test_all_zeros_forecasts_zero() -> None:
    fc = forecast_demand(np.zeros(60), 14)
    assert np.all(fc.values == 0) and np.all(fc.mean == 0)


def test_history_with_gaps_is_forecast_from_the_known_points() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(24 * 21)
    y = 100 + 30 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 3, t.size)
    y[50:90] = np.nan  # missing data
    y[300:320] = 0.0  # exporter outage: zeros in a busy series
    fc = forecast_demand(y, 48, step_s=3600)
    _assert_sane(fc.values, fc.mean)
    median = fc.at(0.5)
    assert median.min() > 60 and median.max() < 140  # keeps the level, not dragged down by the outage


def test_three_point_series_gives_a_forecast() -> None:
    fc = forecast_demand(np.array([5.0, 7.0, 6.0]), 5)
    _assert_sane(fc.values, fc.mean)
    assert 3 < fc.at(0.5)[0] < 9


def test_two_points_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="at least 3"):
        forecast_demand(np.array([5.0, 7.0]), 5)


def test_negative_demand_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match=">= 0"):
        AutoForecaster().fit(np.array([1.0, -2.0, 3.0, 4.0]))


def test_single_huge_spike_does_not_take_over_the_forecast() -> None:
    rng = np.random.default_rng(2)
    y = rng.normal(100, 5, 60)
    y[30] = 1e7
    fc = forecast_demand(y, 30)
    _assert_sane(fc.values, fc.mean)
    assert fc.at(0.5).max() < 1_000  # the median stays at the normal level
    assert fc.at(0.1).min() < 100 < fc.at(0.9).max()


def test_serving_model_rejects_bad_horizon() -> None:
    m = ServingForecaster((7,)).fit(np.arange(30, dtype=float))
    with pytest.raises(ValidationError):
        m.predict(0)


def test_intermittent_quantiles_jump_between_zero_and_job_size() -> None:
    y = np.zeros(100)
    y[::10] = 64.0  # a 64-GPU job every 10 periods
    fc = IntermittentForecaster().fit(y).predict(5, (0.5, 0.95))
    assert np.all(fc.at(0.5) == 0.0)
    assert np.all(fc.at(0.95) == pytest.approx(64.0, rel=0.3))
