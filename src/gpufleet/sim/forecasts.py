"""The forecasts the loop issued in the simulated world, and how far off they were.

A part of :class:`~gpufleet.sim.world.World`: every forecast period the reservation desk (sim/desk.py) scores the
last forecast of each SKU against the demand measured since (absolute error and actual, for the WAPE of the
summary) and asks the loop's forecaster for the next one; the node scaler's scale-down context reads the median of
the current one (:meth:`ForecastBook.upcoming`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpufleet.sim.kinds import HOUR_S

if TYPE_CHECKING:
    from gpufleet.ports import DemandForecast, Forecaster


class ForecastBook:
    def __init__(self, forecaster: Forecaster, n_sku: int) -> None:
        self.forecaster = forecaster
        self.issued: dict[int, tuple[int, DemandForecast]] = {}  # sku -> (issued hour, hourly forecast)
        self.abs_err = [0.0] * n_sku
        self.actual = [0.0] * n_sku

    def score_and_issue(self, s: int, hist: np.ndarray, hour: int, horizon_h: int) -> DemandForecast | None:
        """Score SKU ``s``'s last forecast against ``hist`` (hourly demand up to ``hour``), then forecast the next
        ``horizon_h`` hours (None with less than a day of history)."""
        prev = self.issued.get(s)
        if prev is not None:
            issued, fc_prev = prev
            actual = hist[issued:]
            self.abs_err[s] += float(np.abs(actual - fc_prev.median[: len(actual)]).sum())
            self.actual[s] += float(actual.sum())
        fc = self.forecaster.forecast(hist, HOUR_S, horizon_h) if len(hist) >= 24 else None
        if fc is not None:
            self.issued[s] = (hour, fc)
        return fc

    def upcoming(self, s: int, now: int) -> np.ndarray | None:
        """The median of the current forecast from this hour on (None before the first forecast)."""
        fc = self.issued.get(s)
        if fc is None:
            return None
        issued, f = fc
        return f.quantiles[0.5][max(0, now // HOUR_S - issued) :]
