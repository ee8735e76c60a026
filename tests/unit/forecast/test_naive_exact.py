"""The loop's Naive and SeasonalNaive (forecast/baselines.py) are statsforecast's, bit for bit.

The loop's forecaster tracks both as candidates every call; they are written out so that a simulation does not
import statsforecast (with pandas and statsmodels) at its first forecast. Their forecasts must equal what
statsforecast's models return for every series, horizon and level set (the decisions that read them are unchanged).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from statsforecast.models import Naive, SeasonalNaive

from gpufleet.forecast.baselines import (
    NaiveExact,
    SeasonalNaiveExact,
    StatsforecastModel,
    naive,
    seasonal_naive,
)
from gpufleet.forecast.conformal import calibrated_forecaster

_values = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
_levels = st.lists(st.integers(min_value=1, max_value=99), min_size=0, max_size=6, unique=True)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for k, v in a.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(b[k]), strict=True)


@settings(max_examples=200, deadline=None)
@given(y=st.lists(_values, min_size=2, max_size=120), h=st.integers(1, 80), level=_levels)
def test_naive_equals_statsforecast(y: list[float], h: int, level: list[int]) -> None:
    arr = np.asarray(y, dtype=np.float64)
    _same(NaiveExact().fit(arr).predict(h, level or None), Naive().fit(arr).predict(h=h, level=level or None))


@settings(max_examples=200, deadline=None)
@given(
    y=st.lists(_values, min_size=2, max_size=150),
    season=st.integers(1, 30),
    h=st.integers(1, 90),
    level=_levels,
)
def test_seasonal_naive_equals_statsforecast(y: list[float], season: int, h: int, level: list[int]) -> None:
    arr = np.asarray(y, dtype=np.float64)
    if arr.size < season:
        return  # statsforecast pads a partial season with NaN; the loop's factory uses Naive there
    ours = SeasonalNaiveExact(season).fit(arr).predict(h, level or None)
    _same(ours, SeasonalNaive(season_length=season).fit(arr).predict(h=h, level=level or None))


@settings(max_examples=60, deadline=None)
@given(
    y=st.lists(st.one_of(_values, st.just(float("nan"))), min_size=3, max_size=200),
    season=st.integers(1, 24),
    h=st.integers(1, 48),
)
def test_wrapped_models_equal_statsforecast(y: list[float], season: int, h: int) -> None:
    """The wrappers (gap filling, levels, quantile rows) give the same forecast as with statsforecast's models."""
    arr = np.asarray(y, dtype=np.float64)
    if not np.isfinite(arr).any():
        return
    qs = (0.1, 0.25, 0.5, 0.75, 0.9)
    pairs = [
        (naive(), StatsforecastModel("naive", lambda n: Naive())),
        (
            seasonal_naive(season),
            StatsforecastModel(
                "seasonal_naive", lambda n: SeasonalNaive(season_length=season) if n > season else Naive(), season
            ),
        ),
    ]
    for ours, theirs in pairs:
        a = ours.fit(arr).predict(h, qs)
        b = theirs.fit(arr).predict(h, qs)
        np.testing.assert_array_equal(a.mean, b.mean, strict=True)
        np.testing.assert_array_equal(a.values, b.values, strict=True)
        assert a.levels == b.levels and a.method == b.method


def test_the_loop_forecaster_equals_it_with_statsforecast() -> None:
    """The loop's calibrated forecaster (three candidates, windows, tails) on a daily-seasonal hourly series: the
    same forecast with the written-out models as with statsforecast's."""
    rng = np.random.default_rng(5)
    t = np.arange(24 * 40)
    y = 50 + 20 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 4, t.size)
    y[rng.integers(0, t.size, 30)] = np.nan
    qs = (0.05, 0.25, 0.5, 0.75, 0.95)
    ours = calibrated_forecaster((24, 168), max_history=672).fit(y).predict(168, qs)
    theirs_f = calibrated_forecaster((24, 168), max_history=672)
    theirs_f.candidates["naive"] = lambda: StatsforecastModel("naive", lambda n: Naive())
    theirs_f.candidates["seasonal_naive"] = lambda: StatsforecastModel(
        "seasonal_naive", lambda n: SeasonalNaive(season_length=24) if n > 24 else Naive(), 24
    )
    theirs = theirs_f.fit(y).predict(168, qs)
    np.testing.assert_array_equal(ours.values, theirs.values, strict=True)
    np.testing.assert_array_equal(ours.mean, theirs.mean, strict=True)
    assert ours.method == theirs.method
