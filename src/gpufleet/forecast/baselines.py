"""Baseline forecasters wrapped in this package's interface: statsforecast's Naive, SeasonalNaive, AutoETS and
MSTL, with their own (parametric) prediction intervals turned into quantiles. Used by the benchmark, and as
components in :mod:`gpufleet.forecast.serving` where they pay for themselves.

Naive and SeasonalNaive are statsforecast's own computations (fit: the last value or season, the residuals'
root mean square as sigma; predict: normal intervals of ``sigma sqrt(steps)``), written out here with the same
numpy operations so that the loop's forecaster, which tracks both as candidates, does not import statsforecast
(with pandas and statsmodels, about a second of every simulation's start-up). They return what statsforecast's
models return, bit for bit (``tests/unit/forecast/test_naive_exact.py`` compares them).

Gaps (NaN) are filled by :func:`gpufleet.forecast.gaps.fill_gaps` before fitting, since these models need a
complete series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.gaps import fill_gaps
from gpufleet.forecast.quantiles import (
    DEFAULT_QUANTILES,
    FloatArray,
    check_quantiles,
    make_forecast,
)
from gpufleet.ports import DemandForecast


def levels_for(quantiles: Sequence[float]) -> list[int]:
    """statsforecast interval levels (in %) that yield the requested symmetric quantiles."""
    out = {round(abs(2 * q - 1) * 100) for q in quantiles if abs(q - 0.5) > 1e-9}
    return sorted(lv for lv in out if lv > 0)


def quantiles_from_levels(out: dict[str, Any], quantiles: Sequence[float]) -> FloatArray:
    """Rows of quantile forecasts from a statsforecast output with ``lo-L`` / ``hi-L`` entries."""
    mean = np.asarray(out["mean"], dtype=np.float64)
    rows = []
    for q in quantiles:
        lv = round(abs(2 * q - 1) * 100)
        if lv == 0:
            rows.append(mean)
        else:
            side = "lo" if q < 0.5 else "hi"
            rows.append(np.asarray(out[f"{side}-{lv}"], dtype=np.float64))
    return np.vstack(rows)


class StatsforecastModel:
    """A statsforecast model behind :class:`~gpufleet.forecast.base.ForecastModel`."""

    def __init__(self, name: str, factory: Any, season: int = 0) -> None:
        self.name = name
        self._factory = factory
        self.season = season

    def fit(self, y: FloatArray) -> Self:
        arr = np.asarray(y, dtype=np.float64)
        if arr.size < 2:
            raise ValidationError("y", f"{self.name} needs at least 2 points, got {arr.size}")
        self.y_ = fill_gaps(arr, ~np.isfinite(arr), self.season)
        self.model_ = self._factory(len(self.y_))
        self.model_.fit(self.y_)
        return self

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        qs = check_quantiles(quantiles)
        out = self.model_.predict(h=h, level=levels_for(qs))
        return make_forecast(np.asarray(out["mean"]), quantiles_from_levels(out, qs), qs, self.name)


def _normal_intervals(mean: FloatArray, level: list[int], sigmah: FloatArray) -> dict[str, FloatArray]:
    """statsforecast's ``_calculate_intervals`` with its normal distribution: ``mean -/+ z sigmah`` per level, z
    the standard normal's quantile (``scipy.stats.norm(scale=1.0).ppf``: ``ndtri(p) * 1.0 + 0.0``)."""
    from scipy import special

    h = len(mean)
    z = special.ndtri(0.5 + np.asarray(level) / 200) * 1.0 + 0.0
    zz = np.repeat(z, h).reshape(z.shape[0], h)
    lower = mean - zz * sigmah
    upper = mean + zz * sigmah
    return {
        **{f"lo-{lv}": lower[i] for i, lv in enumerate(level)},
        **{f"hi-{lv}": upper[i] for i, lv in enumerate(level)},
    }


def _sigma(residuals: FloatArray, n: int) -> Any:
    """statsforecast's ``_calculate_sigma``: the root of the residuals' sum of squares over ``n``."""
    if n > 0:
        return np.sqrt(np.nansum(residuals**2) / n)
    return 0


class NaiveExact:
    """statsforecast's ``Naive`` (no conformal intervals): every step forecasts the last value; sigma the root
    mean square of the one-step differences; intervals widen as ``sqrt(step)``."""

    def fit(self, y: FloatArray) -> Self:
        fitted = np.full_like(y, np.nan)
        fitted[1:] = np.roll(y, 1)[1:]
        self.last_ = y[-1]
        self.sigma_ = _sigma(y - fitted, len(y) - 1)
        return self

    def predict(self, h: int, level: list[int] | None = None) -> dict[str, FloatArray]:
        res = {"mean": np.full(h, self.last_)}
        if level is None:
            return res
        sigmah = self.sigma_ * np.sqrt(np.arange(1, h + 1))
        return {**res, **_normal_intervals(res["mean"], sorted(level), sigmah)}


class SeasonalNaiveExact:
    """statsforecast's ``SeasonalNaive`` (no conformal intervals) on a series of at least a season: the last
    season repeated; sigma the root mean square of the season-over-season differences; intervals widen as
    ``sqrt(seasons ahead)``."""

    def __init__(self, season_length: int) -> None:
        self.season_length = season_length

    def fit(self, y: FloatArray) -> Self:
        m = self.season_length
        n = y.size
        if n < m:  # statsforecast pads a partial season with NaN (and warns); the loop never asks for that
            raise ValidationError("y", f"seasonal naive needs a whole season ({m} points), got {n}")
        self.season_vals_ = np.full(m, np.nan, dtype=y.dtype)
        self.season_vals_[:m] = y[-m:]
        fitted = np.empty_like(y)
        fitted[:m] = np.nan
        fitted[m:] = y[: n - m]
        self.sigma_ = _sigma(y - fitted, n - m)
        return self

    def predict(self, h: int, level: list[int] | None = None) -> dict[str, FloatArray]:
        m = self.season_length
        res = {"mean": np.tile(self.season_vals_, math.ceil(h / m))[:h]}
        if level is None:
            return res
        sigmah = self.sigma_ * np.sqrt(np.floor(np.arange(h) / m) + 1)
        return {**res, **_normal_intervals(res["mean"], sorted(level), sigmah)}


def naive() -> StatsforecastModel:
    return StatsforecastModel("naive", lambda n: NaiveExact())


def seasonal_naive(season: int) -> StatsforecastModel:
    return StatsforecastModel(
        "seasonal_naive", lambda n: SeasonalNaiveExact(season) if n > season else NaiveExact(), season
    )


def autoets(season: int) -> StatsforecastModel:
    from statsforecast.models import AutoETS

    # statsforecast's ETS supports seasons up to 24 and needs two of them; longer seasons fit non-seasonal
    return StatsforecastModel(
        "autoets", lambda n: AutoETS(season_length=season if 1 < season <= 24 and n >= 2 * season else 1), season
    )


def mstl(seasons: Sequence[int]) -> StatsforecastModel:
    from statsforecast.models import MSTL, AutoETS, Naive

    def make(n: int) -> Any:
        usable = [s for s in seasons if s > 1 and 2 * s <= n]
        if not usable:
            return Naive()
        return MSTL(season_length=usable, trend_forecaster=AutoETS(model="ZZN"))

    return StatsforecastModel("mstl", make, min(seasons) if seasons else 0)
