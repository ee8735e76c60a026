"""Baseline forecasters wrapped in this package's interface: statsforecast's Naive, SeasonalNaive, AutoETS and
MSTL, with their own (parametric) prediction intervals turned into quantiles. Used by the benchmark, and as
components in :mod:`gpufleet.forecast.serving` where they pay for themselves.

Gaps (NaN) are filled by :func:`gpufleet.forecast.gaps.fill_gaps` before fitting, since these models need a
complete series.
"""

from __future__ import annotations

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


def naive() -> StatsforecastModel:
    from statsforecast.models import Naive

    return StatsforecastModel("naive", lambda n: Naive())


def seasonal_naive(season: int) -> StatsforecastModel:
    from statsforecast.models import Naive, SeasonalNaive

    return StatsforecastModel(
        "seasonal_naive", lambda n: SeasonalNaive(season_length=season) if n > season else Naive(), season
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
