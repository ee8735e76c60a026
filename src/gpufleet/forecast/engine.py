"""gpufleet's forecaster: the one behind the control loop's ``Forecaster`` port, wherever the loop runs.

The simulator calls it weekly (a week of hours ahead), ``gpufleet forecast`` and :func:`forecast_demand` call it,
and ``bench forecast`` / ``bench generalize`` score it (through :meth:`GpufleetForecaster.model`): one object,
one output type (:class:`gpufleet.ports.DemandForecast`). It is the
:class:`~gpufleet.forecast.conformal.CalibratedForecaster` over the default candidates (the auto-routed
ensemble, seasonal naive, naive): model choice and interval recalibration (adaptive conformal, both tails:
:mod:`gpufleet.forecast.aci`) from the series' own tracked errors.

Cost: the calibration refits every candidate at the tracked origins; the forecaster keeps a
:class:`~gpufleet.forecast.conformal.ForecastMemo` so that a caller forecasting every ``horizon`` steps reuses
the fits of its earlier calls (the same forecast as a refit: the memo is keyed by the data each fit saw).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.aci import INTERVAL_RULES, AciSettings
from gpufleet.forecast.conformal import (
    CHOICE_WINDOWS,
    SWITCH_MARGIN,
    CalibratedForecaster,
    ForecastMemo,
    calibrated_forecaster,
)
from gpufleet.forecast.loop import seasons_for_step
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, check_quantiles, make_forecast
from gpufleet.ports import DemandForecast, FloatArray

LOOP_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)
DAY_S = 86_400
#: Fits see at least this many steps when the history has them (a year of days: a daily grid is never cut short).
MIN_HISTORY_STEPS = 366


def check_no_infinity(y: FloatArray, field: str = "history") -> None:
    """ValidationError naming ``field`` and the first index when ``y`` holds +inf or -inf."""
    bad = np.flatnonzero(np.isinf(y))
    if bad.size:
        i = int(bad[0])
        raise ValidationError(field, f"demand must be finite ({y[i]:+} at index {i}; NaN marks a missing value)")


def check_history(history: FloatArray, field: str = "history") -> FloatArray:
    """The history as a float array, or ValidationError: an infinite value (NaN is the gap marker; an infinity is
    a broken reading, not a missing one), fewer than 3 known points, or negative demand."""
    y = np.asarray(history, dtype=np.float64).ravel()
    check_no_infinity(y, field)
    known = y[np.isfinite(y)]
    if known.size < 3:
        raise ValidationError(field, f"need at least 3 known points, got {known.size}")
    if np.any(known < 0):
        raise ValidationError(field, "demand must be >= 0 (negative values found)")
    return y


class GpufleetForecaster:
    """The loop's forecaster (see module docstring).

    ``max_history_s`` bounds the history each fit sees (the most recent steps before its origin, but never fewer
    than ``MIN_HISTORY_STEPS``; None = all): four weeks cover the weekly season four times and keep a call cheap
    over a long simulation (672 hourly steps, 4,032 ten-minute steps). ``quantiles``:
    the levels of every forecast (a call may ask for others). ``memo_size``: fits kept for reuse (0 = none, for a
    one-off call: with a memo every candidate is also forecast at the forecast origin, for the next call).
    ``interval`` / ``switch_margin`` / ``choice_windows`` / ``aci``: the recalibration rule, the model-choice margin,
    the tracked windows that choose the model and the recalibration's settings (defaults: adaptive conformal tails,
    a 10% margin, 4 windows; the benchmarks' other settings pass others). After a call, ``last_`` is the
    calibrated forecaster that made it (``chosen_``, ``reason_``, ``factors_``, ``tail_factors_``: the decision
    and its reason code).
    """

    name = "gpufleet"

    def __init__(
        self,
        max_history_s: int | None = 28 * DAY_S,
        quantiles: Sequence[float] = LOOP_QUANTILES,
        memo_size: int = 512,
        interval: str = "aci",
        switch_margin: float = SWITCH_MARGIN,
        choice_windows: int = CHOICE_WINDOWS,
        aci: AciSettings | None = None,
    ) -> None:
        if max_history_s is not None and max_history_s <= 0:
            raise ValidationError("max_history_s", f"must be > 0 (or None), got {max_history_s}")
        self.max_history_s = max_history_s
        self.quantiles = check_quantiles(quantiles)  # strictly increasing: the levels of every forecast
        if memo_size < 0:
            raise ValidationError("memo_size", f"must be >= 0 (0 = no reuse of fits), got {memo_size}")
        self.memo = ForecastMemo(memo_size) if memo_size > 0 else None
        self.last_: CalibratedForecaster | None = None
        if interval not in INTERVAL_RULES:
            raise ValidationError("interval", f"choose from {', '.join(INTERVAL_RULES)}; got {interval!r}")
        self.interval = interval
        self.switch_margin = switch_margin
        if choice_windows < 1:
            raise ValidationError("choice_windows", f"must be >= 1, got {choice_windows}")
        self.choice_windows = choice_windows
        self.aci = aci

    def forecast(
        self, history: FloatArray, step_s: int, horizon: int, quantiles: Sequence[float] | None = None
    ) -> DemandForecast:
        """``horizon`` steps of demand after ``history`` (regular ``step_s`` grid, oldest first, NaN = gap).
        Fewer than 3 known points: zeros (method ``zeros``); negative demand: ValidationError."""
        qs = self.quantiles if quantiles is None else check_quantiles(quantiles)
        if horizon < 1:
            raise ValidationError("horizon", f"must be >= 1, got {horizon}")
        y = np.asarray(history, dtype=np.float64).ravel()
        if int(np.isfinite(y).sum()) < 3:
            self.last_ = None
            return DemandForecast(np.zeros(horizon), qs, np.zeros((len(qs), horizon)), "zeros")
        cf = calibrated_forecaster(
            seasons_for_step(step_s),
            max_history=self.history_steps(step_s),
            memo=self.memo,
            interval=self.interval,
            switch_margin=self.switch_margin,
            windows=self.choice_windows,
            aci=self.aci,
        )
        fc = cf.fit(y).predict(horizon, qs)
        self.last_ = cf
        return make_forecast(fc.mean, fc.values, qs, fc.method, floor=0.0)

    def history_steps(self, step_s: int) -> int | None:
        """The most recent steps each fit sees on a ``step_s`` grid (None = all)."""
        if self.max_history_s is None:
            return None
        return max(self.max_history_s // step_s, MIN_HISTORY_STEPS)

    def model(self, step_s: int) -> LoopModel:
        """This forecaster behind the estimator interface (``fit`` / ``predict``) for backtests: every model a
        backtest builds shares this forecaster (its settings and memo)."""
        return LoopModel(self, step_s)


class LoopModel:
    """A :class:`GpufleetForecaster` as a :class:`~gpufleet.forecast.base.ForecastModel` on a ``step_s`` grid."""

    name = "gpufleet"

    def __init__(self, forecaster: GpufleetForecaster, step_s: int) -> None:
        self.forecaster = forecaster
        self.step_s = step_s

    def fit(self, y: FloatArray) -> Self:
        arr = np.asarray(y, dtype=np.float64).ravel()
        if not np.isfinite(arr).any():
            raise ValidationError("y", "every point is a gap (NaN); nothing to forecast from")
        self.y_ = arr
        return self

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        return self.forecaster.forecast(self.y_, self.step_s, h, quantiles)
