"""The forecasting model interface, in the statsforecast style: ``fit(y)`` then ``predict(h, quantiles)``.

Constructor arguments are settings (season lengths, knobs), ``fit`` stores fitted state in trailing-underscore
attributes and returns ``self``, ``predict`` returns a :class:`DemandForecast` whose quantiles never cross.
``y`` is a 1-d float array on a regular grid, oldest first; NaN marks a gap (missing data, not zero demand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Self

from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray
from gpufleet.ports import DemandForecast


class ForecastModel(Protocol):
    """What every model in this package offers (the estimator interface). The loop's forecasting stage is the
    port :class:`gpufleet.ports.Forecaster`; ``forecast/engine.py`` implements it with these models."""

    name: str

    def fit(self, y: FloatArray) -> Self: ...

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast: ...
