"""Review (decision loop): the baseline seasonal-naive forecaster and gaps in the history."""

from __future__ import annotations

import numpy as np

from gpufleet.forecast.seasonal_naive import SeasonalNaive


def test_seasonal_naive_keeps_the_season_aligned_across_a_gap() -> None:
    """Review (fixed), the defect: ``forecast/seasonal_naive.py::SeasonalNaive.forecast`` drops NaN entries (``h =
    h[~np.isnan(h)]``) before slicing the last season, although the port's history is a regular grid where NaN marks a
    gap. One missing hour in the last day shifts every forecast step by one phase: on a series equal to its hour of day,
    the forecast for midnight is 23 and hour 19 is never forecast. (The gpufleet forecaster on the same series gives
    0..23.)"""
    hours = (np.arange(24 * 14) % 24).astype(float)
    history = hours.copy()
    history[-5] = np.nan  # one hour missing in the last day
    fc = SeasonalNaive().forecast(history, 3600, 24)
    np.testing.assert_allclose(fc.median, np.arange(24.0))
