"""Forecast accuracy metrics. All ignore points marked as gaps (NaN actuals).

* ``mase``: mean absolute error of the point forecast / ``scale``.
* ``scaled_pinball``: mean over quantile levels of the mean pinball loss / ``scale``.
* ``coverage``: share of actuals inside ``[lower, upper]``.
* ``seasonal_naive_scale``: the in-sample mean absolute error of the seasonal naive forecast (season ``m``),
  the usual MASE denominator; it falls back to lag 1, then to the mean absolute level, then to 1.0 so a
  flat or all-zero history never divides by zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError

FloatArray = npt.NDArray[np.float64]


def seasonal_naive_scale(y_train: FloatArray, season: int) -> float:
    """In-sample MAE of the seasonal naive forecast; NaN (gap) pairs are skipped."""
    y = np.asarray(y_train, dtype=np.float64)
    for m in (season, 1):
        if 0 < m < len(y):
            d = np.abs(y[m:] - y[:-m])
            d = d[np.isfinite(d)]
            if d.size and float(d.mean()) > 0:
                return float(d.mean())
    finite = np.abs(y[np.isfinite(y)])
    if finite.size and float(finite.mean()) > 0:
        return float(finite.mean())
    return 1.0


def _pair(actual: FloatArray, forecast: FloatArray) -> tuple[FloatArray, FloatArray]:
    a = np.asarray(actual, dtype=np.float64)
    f = np.asarray(forecast, dtype=np.float64)
    if a.shape != f.shape:
        raise ValidationError("forecast", f"shape {f.shape} does not match actuals {a.shape}")
    return a, f


def mase(actual: FloatArray, point: FloatArray, scale: float) -> float:
    a, f = _pair(actual, point)
    ok = np.isfinite(a)
    if not ok.any():
        return float("nan")
    return float(np.mean(np.abs(a[ok] - f[ok])) / scale)


def pinball(actual: FloatArray, quantile_forecast: FloatArray, q: float) -> float:
    """Mean pinball loss of one quantile level (unscaled)."""
    a, f = _pair(actual, quantile_forecast)
    ok = np.isfinite(a)
    if not ok.any():
        return float("nan")
    diff = a[ok] - f[ok]
    return float(np.mean(np.maximum(q * diff, (q - 1.0) * diff)))


def scaled_pinball(actual: FloatArray, values: FloatArray, quantiles: Sequence[float], scale: float) -> float:
    """Mean over ``quantiles`` of the pinball loss of each row of ``values`` (shape ``(len(q), h)``) / scale."""
    v = np.asarray(values, dtype=np.float64)
    losses = [pinball(actual, v[i], q) for i, q in enumerate(quantiles)]
    return float(np.mean(losses) / scale)


def coverage(actual: FloatArray, lower: FloatArray, upper: FloatArray) -> float:
    a = np.asarray(actual, dtype=np.float64)
    ok = np.isfinite(a)
    if not ok.any():
        return float("nan")
    tol = 1e-9 * np.maximum(1.0, np.abs(a[ok]))  # equal up to rounding counts as inside
    inside = (a[ok] >= np.asarray(lower)[ok] - tol) & (a[ok] <= np.asarray(upper)[ok] + tol)
    return float(np.mean(inside))
