"""One forecast type: the loop's port forecasters and the models all return ports.DemandForecast."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.engine import GpufleetForecaster
from gpufleet.forecast.quantiles import make_forecast
from gpufleet.forecast.seasonal_naive import SeasonalNaive
from gpufleet.forecast.serving import ServingForecaster
from gpufleet.ports import DemandForecast


def test_levels_rows_median_and_interpolation() -> None:
    fc = make_forecast(np.array([5.0, 6.0]), np.array([[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]), (0.1, 0.5, 0.9), "m")
    assert isinstance(fc, DemandForecast)
    assert fc.levels == (0.1, 0.5, 0.9) and fc.horizon == 2
    assert list(fc.quantiles) == [0.1, 0.5, 0.9]
    np.testing.assert_array_equal(fc.quantiles[0.9], [9.0, 10.0])
    np.testing.assert_array_equal(fc.median, [5.0, 6.0])
    np.testing.assert_allclose(fc.at(0.7), [7.0, 8.0])
    with pytest.raises(ValidationError):
        fc.at(0.95)


def test_stage_forecasters_and_models_return_the_same_type() -> None:
    t = np.arange(21 * 24, dtype=np.float64)
    y = 100 + 30 * np.sin(2 * np.pi * t / 24)
    for fc in (
        SeasonalNaive().forecast(y, 3600, 48),
        GpufleetForecaster().forecast(y, 3600, 48),
        ServingForecaster(seasons=(24,)).fit(y).predict(48, (0.1, 0.5, 0.9)),
    ):
        assert type(fc) is DemandForecast
        assert fc.values.shape == (len(fc.levels), 48)
        assert list(fc.levels) == sorted(fc.levels)
        assert (np.diff(fc.values, axis=0) >= 0).all()  # quantiles never cross


def test_short_history_gives_zero_forecasts_on_the_same_levels() -> None:
    fc = GpufleetForecaster().forecast(np.array([np.nan, 1.0]), 3600, 5)
    assert fc.levels == (0.1, 0.5, 0.9) and not fc.values.any() and fc.method == "zeros"
    fc2 = SeasonalNaive().forecast(np.array([np.nan]), 3600, 5)
    assert fc2.levels == (0.1, 0.5, 0.9) and not fc2.values.any()
