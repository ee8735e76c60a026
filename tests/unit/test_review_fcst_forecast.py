"""Review (fcst): the forecasting baselines' quantiles against their own point forecast."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.forecast.seasonal_naive import SeasonalNaive


@pytest.mark.xfail(
    strict=True,
    reason="SeasonalNaive keeps p50 = the repeated last season but adds the error quantiles to p10/p90 and then "
    "lifts p50 to p10: on a growing history every row moves above the point forecast. A fix changes the simulator's "
    "baseline loop and the capacity forecast under 3 days of history (control/forecasting.py), so it is reported",
)
@settings(max_examples=50, deadline=None)
@given(
    level=st.floats(0.0, 1e4),
    growth=st.floats(0.01, 100.0),
    noise=st.lists(st.floats(-0.001, 0.001), min_size=21, max_size=21),
)
def test_seasonal_naive_point_forecast_is_its_median(level: float, growth: float, noise: list[float]) -> None:
    """Review (reported), the defect: SeasonalNaive.forecast, documented as "repeat the last season; quantiles from
    the in-sample distribution of seasonal differences", returns on a steadily growing daily history (every weekly
    difference positive) a p50 of the last season plus the p10 error and a mean (the repeated season) below its own
    p10, so the band says the repeated season is impossible (e.g. history 10..30: mean 24..30, p10 = p50 = p90 =
    31..37); the capacity forecast serves that band for a SKU with under 3 days of history."""
    y = level + growth * np.arange(21.0) + np.asarray(noise)
    fc = SeasonalNaive(season_s=7 * 86400, quantiles=(0.1, 0.5, 0.9)).forecast(y, 86400, 7)
    np.testing.assert_allclose(fc.at(0.5), fc.mean)
    assert np.all(fc.at(0.1) <= fc.mean + 1e-9) and np.all(fc.mean <= fc.at(0.9) + 1e-9)
