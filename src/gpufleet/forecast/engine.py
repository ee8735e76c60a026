"""gpufleet's forecaster behind the control loop's ``Forecaster`` port (the simulator calls it daily)."""

from __future__ import annotations

import numpy as np

from gpufleet.forecast.loop import forecast_demand
from gpufleet.forecast.quantiles import check_quantiles
from gpufleet.ports import DemandForecast, FloatArray

LOOP_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)


class GpufleetForecaster:
    """The auto-routed ensemble (serving shape) / intermittent (lumpy) model on the demand history.

    ``max_history_steps`` bounds the history it fits on (the most recent steps), which keeps a daily call cheap
    over a long simulation; four weeks of hourly points cover the weekly season four times.
    """

    def __init__(self, max_history_steps: int = 28 * 24, quantiles: tuple[float, ...] = LOOP_QUANTILES) -> None:
        self.max_history_steps = max_history_steps
        self.quantiles = check_quantiles(quantiles)  # strictly increasing: the levels of every forecast

    def forecast(self, history: FloatArray, step_s: int, horizon: int) -> DemandForecast:
        h = np.asarray(history, dtype=np.float64)[-self.max_history_steps :]
        if int(np.isfinite(h).sum()) < 3:
            zeros = np.zeros(horizon)
            return DemandForecast(zeros, self.quantiles, np.zeros((len(self.quantiles), horizon)), "zeros")
        fc = forecast_demand(h, horizon, step_s=step_s, quantiles=self.quantiles)
        values = np.stack([np.maximum(fc.at(q), 0.0) for q in self.quantiles])
        return DemandForecast(np.maximum(fc.mean, 0.0), self.quantiles, values, fc.method)
