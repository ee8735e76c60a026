"""Forecasting intermittent and lumpy demand (many zero periods, irregular sizes): Croston, SBA, TSB, ADIDA
and IMAPA in numpy, and the ADI / CV^2 classification that routes a series to one of them.

Classification (Syntetos, Boylan & Croston 2005): ADI = mean interval between non-zero demands, CV^2 = squared
coefficient of variation of the non-zero sizes. Cut-offs 1.32 and 0.49:

=========  ===========  ===============================================
ADI        CV^2         class -> method
=========  ===========  ===============================================
< 1.32     < 0.49       smooth -> not intermittent (use the serving ensemble)
< 1.32     >= 0.49      erratic -> IMAPA (temporal aggregation smooths sizes)
>= 1.32    < 0.49       intermittent -> SBA (bias-corrected Croston)
>= 1.32    >= 0.49      lumpy -> TSB (probability updated every period)
=========  ===========  ===============================================

Quantiles: demand in one period is 0 with probability ``1 - p`` and otherwise a draw from the size distribution
(the recent non-zero sizes, rescaled so their mean is the smoothed size). The ``q`` quantile is therefore 0 when
``q <= 1 - p`` and the size quantile at ``(q - (1 - p)) / p`` otherwise: a big job either happens or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Self

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray, check_quantiles, make_forecast
from gpufleet.ports import DemandForecast

DemandClass = Literal["smooth", "erratic", "intermittent", "lumpy", "zero"]
Method = Literal["croston", "sba", "tsb", "adida", "imapa"]

ADI_CUTOFF = 1.32
CV2_CUTOFF = 0.49


@dataclass(frozen=True, slots=True)
class DemandProfile:
    """What the router decided and why: ``reason`` is a short code such as ``adi>=1.32,cv2<0.49``."""

    adi: float
    cv2: float
    demand_class: DemandClass
    reason: str


def classify(y: FloatArray) -> DemandProfile:
    """ADI / CV^2 class of a history (NaN gaps ignored)."""
    v = np.asarray(y, dtype=np.float64)
    v = v[np.isfinite(v)]
    nz = np.flatnonzero(v > 0)
    if nz.size == 0:
        return DemandProfile(float("inf"), 0.0, "zero", "no_nonzero_demand")
    adi = float(len(v) / nz.size)
    sizes = v[nz]
    cv2 = float((sizes.std() / sizes.mean()) ** 2) if sizes.size > 1 else 0.0
    hi_adi, hi_cv = adi >= ADI_CUTOFF, cv2 >= CV2_CUTOFF
    cls: DemandClass = ("lumpy" if hi_cv else "intermittent") if hi_adi else ("erratic" if hi_cv else "smooth")
    reason = f"adi{'>=' if hi_adi else '<'}{ADI_CUTOFF},cv2{'>=' if hi_cv else '<'}{CV2_CUTOFF}"
    return DemandProfile(adi, cv2, cls, reason)


def _ses_last(x: FloatArray, alpha: float) -> float:
    """Final level of simple exponential smoothing started at the mean (a stable start for short histories)."""
    level = float(np.mean(x))
    for v in x:
        level += alpha * (float(v) - level)
    return level


def croston(y: FloatArray, alpha: float = 0.1, *, sba: bool = False) -> tuple[float, float]:
    """(demand rate per period, occurrence probability). SBA multiplies by ``1 - alpha / 2`` (bias correction)."""
    nz = np.flatnonzero(y > 0)
    if nz.size == 0:
        return 0.0, 0.0
    sizes = y[nz]
    intervals = np.diff(np.concatenate(([-1], nz))).astype(np.float64)
    z = _ses_last(sizes, alpha)
    # the periods since the last demand are a lower bound of the interval now open: without it one job long ago
    # followed by nothing would still be forecast to recur every period (Croston updates only on demand)
    open_interval = float(len(y) - nz[-1])
    p = max(_ses_last(intervals, alpha), open_interval, 1.0)
    rate = z / p * ((1.0 - alpha / 2.0) if sba else 1.0)
    return rate, min(1.0, 1.0 / p)


def tsb(y: FloatArray, alpha_d: float = 0.1, alpha_p: float = 0.1) -> tuple[float, float]:
    """Teunter-Syntetos-Babai: occurrence probability smoothed every period, size only on demand periods."""
    nz = np.flatnonzero(y > 0)
    if nz.size == 0:
        return 0.0, 0.0
    z = float(y[nz[0]])
    p = float(nz.size / len(y))
    for v in y[nz[0] :]:
        occurred = v > 0
        p += alpha_p * (float(occurred) - p)
        if occurred:
            z += alpha_d * (float(v) - z)
    return p * z, p


def adida(y: FloatArray, level: int, alpha: float = 0.1) -> float:
    """Aggregate into non-overlapping buckets of ``level`` periods (aligned to the end), SES, disaggregate."""
    k = max(1, level)
    n = (len(y) // k) * k
    if n == 0:
        return float(np.mean(y))
    buckets = y[len(y) - n :].reshape(-1, k).sum(axis=1)
    return _ses_last(buckets, alpha) / k


def imapa(y: FloatArray, max_level: int, alpha: float = 0.1) -> float:
    """Mean of ADIDA forecasts over aggregation levels 1..max_level."""
    return float(np.mean([adida(y, k, alpha) for k in range(1, max(1, max_level) + 1)]))


_ROUTE: dict[DemandClass, Method] = {
    "intermittent": "sba",
    "lumpy": "tsb",
    "erratic": "imapa",
    "smooth": "sba",
    "zero": "tsb",
}


class IntermittentForecaster:
    """Croston-family forecaster with quantiles; ``method=None`` routes by ADI/CV^2 (see module docstring)."""

    name = "intermittent"

    def __init__(self, method: Method | None = None, alpha: float = 0.1, size_window: int = 50) -> None:
        self.method = method
        self.alpha = alpha
        self.size_window = size_window

    def fit(self, y: FloatArray) -> Self:
        arr = np.asarray(y, dtype=np.float64).ravel()
        if arr.size < 1:
            raise ValidationError("y", "empty history")
        # a gap in intermittent demand carries no information; drop it
        v = np.maximum(arr[np.isfinite(arr)], 0.0)
        if v.size == 0:
            raise ValidationError("y", "every point is a gap (NaN); nothing to forecast from")
        self.profile_ = classify(v)
        method: Method = self.method or _ROUTE[self.profile_.demand_class]
        self.method_ = method
        if method == "tsb":
            rate, p = tsb(v, self.alpha, self.alpha)
        elif method in ("croston", "sba"):
            rate, p = croston(v, self.alpha, sba=method == "sba")
        else:
            level = max(1, round(self.profile_.adi)) if np.isfinite(self.profile_.adi) else 1
            rate = adida(v, level, self.alpha) if method == "adida" else imapa(v, level, self.alpha)
            p = float(np.mean(v > 0))
        sizes = v[v > 0][-self.size_window :]
        self.rate_ = max(rate, 0.0)
        self.p_ = float(np.clip(p, 0.0, 1.0))
        # size distribution rescaled so occurrence x mean size = the method's rate
        if sizes.size and self.p_ > 0:
            self.sizes_ = np.sort(sizes * (self.rate_ / self.p_) / sizes.mean())
        else:
            self.sizes_ = np.zeros(1)
        return self

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        if h < 1:
            raise ValidationError("horizon", f"must be >= 1, got {h}")
        qs = np.asarray(check_quantiles(quantiles))
        p = self.p_
        with np.errstate(invalid="ignore", divide="ignore"):
            size_q = np.where(p > 0, (qs - (1.0 - p)) / max(p, 1e-12), 0.0)
        per_q = np.where(qs <= 1.0 - p, 0.0, np.quantile(self.sizes_, np.clip(size_q, 0.0, 1.0)))
        values = np.repeat(per_q[:, None], h, axis=1)
        return make_forecast(
            np.full(h, self.rate_), values, tuple(qs.tolist()), f"{self.name}:{self.method_}", floor=0.0
        )
