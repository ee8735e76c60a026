"""Demand history in, quantile forecasts out: :func:`forecast_demand`, the loop's forecaster
(:class:`gpufleet.forecast.engine.GpufleetForecaster`) as one call, and the seasons a grid implies.

>>> import numpy as np
>>> fc = forecast_demand(np.full(60, 100.0), steps=7, step_s=86_400)
>>> fc.values.shape
(11, 7)
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray
from gpufleet.ports import DemandForecast

HOUR_S = 3600
DAY_S = 86_400


def seasons_for_step(step_s: int) -> tuple[int, ...]:
    """Season lengths (in steps) implied by the grid: daily and weekly cycles where they fit a whole step."""
    if step_s <= 0:
        raise ValidationError("step_s", f"must be > 0, got {step_s}")
    out = []
    for period_s in (DAY_S, 7 * DAY_S):
        if period_s % step_s == 0 and period_s // step_s >= 2:
            out.append(period_s // step_s)
    return tuple(out)


def forecast_demand(
    history: FloatArray,
    steps: int,
    *,
    step_s: int = DAY_S,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
) -> DemandForecast:
    """Quantile forecasts for the next ``steps`` points of an hourly (``step_s=3600``) or daily (``86400``) demand
    history (oldest first; NaN = missing). Seasons follow from ``step_s``; the model is the loop's forecaster,
    :class:`~gpufleet.forecast.engine.GpufleetForecaster` (calibrated from the series' own tracked errors).

    Raises ValidationError for an infinite value, fewer than 3 non-missing points, negative demand, or ``steps < 1``.
    """
    from gpufleet.forecast.engine import GpufleetForecaster, check_history  # engine builds on this module

    if steps < 1:
        raise ValidationError("steps", f"must be >= 1, got {steps}")
    y = check_history(history)
    return GpufleetForecaster(quantiles=quantiles, memo_size=0).forecast(y, step_s, steps)  # one call: no reuse
