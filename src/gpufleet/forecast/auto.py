"""The ``gpufleet`` forecaster: route a series by its demand shape, then forecast with the matching model.

Smooth series (ADI < 1.32 and CV^2 < 0.49, see :mod:`gpufleet.forecast.intermittent`) go to the serving ensemble
(:class:`~gpufleet.forecast.serving.ServingForecaster`); intermittent, lumpy and erratic ones go to the
Croston family (:class:`~gpufleet.forecast.intermittent.IntermittentForecaster`) -- unless their zeros are a
daily rhythm: when the history holds at least two cycles of the shortest season and the per-cycle totals have
demand in (almost) every cycle (ADI < 1.32 at that grain), the zeros are night-time troughs, not intermittency,
and the seasonal ensemble is used. The choice is kept as data in ``route_`` (class and reason code) and
``model_``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.intermittent import ADI_CUTOFF, DemandProfile, IntermittentForecaster, classify
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray
from gpufleet.forecast.serving import ServingForecaster
from gpufleet.ports import DemandForecast


class AutoForecaster:
    """Routes by ADI/CV^2. ``seasons``: season lengths in steps (e.g. ``(24, 168)`` for hourly data)."""

    name = "gpufleet"

    def __init__(self, seasons: Sequence[int] = ()) -> None:
        self.seasons = tuple(seasons)

    def fit(self, y: FloatArray) -> Self:
        arr = np.asarray(y, dtype=np.float64).ravel()
        finite = arr[np.isfinite(arr)]
        if finite.size == 0:
            raise ValidationError("y", "every point is a gap (NaN); nothing to forecast from")
        if np.any(finite < 0):
            raise ValidationError("y", "demand must be >= 0 (negative values found)")
        self.route_: DemandProfile = classify(finite)
        seasonal_zeros = False
        base = min(self.seasons) if self.seasons else 0
        if self.route_.demand_class not in ("smooth", "zero") and base >= 2 and finite.size >= 2 * base:
            n = (arr.size // base) * base
            totals = np.nansum(arr[arr.size - n :].reshape(-1, base), axis=1)
            seasonal_zeros = classify(totals).adi < ADI_CUTOFF
            if seasonal_zeros:
                self.route_ = DemandProfile(
                    self.route_.adi, self.route_.cv2, self.route_.demand_class, "seasonal_zeros"
                )
        if (self.route_.demand_class == "smooth" or seasonal_zeros) and finite.size >= 3:
            self.model_: ServingForecaster | IntermittentForecaster = ServingForecaster(self.seasons).fit(arr)
        else:
            self.model_ = IntermittentForecaster().fit(arr)
        return self

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        return self.model_.predict(h, quantiles)
