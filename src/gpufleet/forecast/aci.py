"""Adaptive conformal recalibration of a forecast's tails from its tracked windows (issue 21).

The accuracy loop keeps, per series, the forecasts it issued and the actuals that followed (the tracked windows
of :class:`~gpufleet.forecast.conformal.CalibratedForecaster`). :func:`aci_tail_factors` runs adaptive conformal
inference (Gibbs & Candès, 2021) over those windows, oldest first, on two multipliers of the band around the
median, one per tail: after each window, the log multiplier of a tail moves by ``step x (miss share - target
miss share)``, where the miss share is the share of that window's observed actuals beyond the tail's outermost
quantile as widened or narrowed by the older windows. A tail that the actuals leave more often than it should is widened,
one they never leave is narrowed. Only windows that ended before the forecast origin are used (the residuals
already observed); the forecast is issued with the multipliers after the newest.

One setting everywhere (``AciSettings`` defaults): 8 tracked windows, step 0.12 per window (0.005 per hourly
point of a 1-day window), coverage target 0.825 for the 10%-90% band (the middle of issue 21's accepted
0.75-0.90; each tail aims at a miss share of 0.0875), multipliers kept in 0.25-4. How they were chosen and on which
traces: docs/benchmarks/generalize.md (forecast settings).

:func:`conformal_tail_factors` is the split-conformal alternative (the bench setting ``calibrated_conformal``,
not the default): per tail, the weighted quantile of scale-free scores (an actual's distance beyond the median in
units of the tail's half-band) over the tracked windows, window weights ``decay ** age``. It ignores the model's
own band, and on the development traces that narrowed too much (docs/forecast.md, "Session 11").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.quantiles import FloatArray

#: How :class:`~gpufleet.forecast.conformal.CalibratedForecaster` recalibrates the band of the chosen model:
#: ``aci`` (default: both tails, widening or narrowing, :func:`aci_tail_factors`) or ``widen`` (the pinball
#: factor 1-4 per block of steps, widening only: the rule before session 10).
INTERVAL_RULES = ("aci", "conformal", "widen")


@dataclass(frozen=True, slots=True)
class AciSettings:
    """``windows``: tracked windows used (most recent); ``step``: change of a tail's log multiplier per window
    and unit of miss share; ``target``: coverage aimed at by the 10%-90% band (outer levels ``q`` aim at a miss
    share of ``q * (1 - target) / 0.2``); ``bounds``: the multipliers' range. Split conformal only
    (:func:`conformal_tail_factors`): ``decay`` (weight of a window ``decay ** age``, newest 0) and ``pool``
    (``points``: one quantile over every tracked actual; ``windows``: the weighted median of each window's)."""

    windows: int = 8
    step: float = 0.12
    target: float = 0.825
    bounds: tuple[float, float] = (0.25, 4.0)
    decay: float = 1.0
    pool: str = "points"

    def __post_init__(self) -> None:
        if self.windows < 1 or self.step < 0 or not 0.0 < self.target < 1.0:
            raise ValidationError("aci", "need windows >= 1, step >= 0 and 0 < target < 1")
        if not 0.0 < self.decay <= 1.0 or self.pool not in ("points", "windows"):
            raise ValidationError("aci", "need 0 < decay <= 1 and pool in points, windows")
        if not 0.0 < self.bounds[0] <= 1.0 <= self.bounds[1]:
            raise ValidationError("aci", f"bounds must hold 1 and be > 0, got {self.bounds}")


def aci_tail_factors(
    rows: Sequence[tuple[FloatArray, FloatArray, FloatArray]],
    quantiles: Sequence[float],
    st: AciSettings = AciSettings(),
) -> tuple[float, float]:
    """(lower, upper) multipliers of the band around the median after adaptive conformal updates over the tracked
    windows ``rows`` (centre ``(h,)``, spread = quantile rows minus centre ``(levels, h)``, actual ``(h,)``;
    newest first, as tracked). A tail without a level beyond the median, or windows without an observed actual,
    leave its multiplier at 1."""
    qs = np.asarray(quantiles, dtype=np.float64)
    share = (1.0 - st.target) / 0.2
    tails: list[tuple[int, float, float] | None] = []
    below, above = np.flatnonzero(qs < 0.5), np.flatnonzero(qs > 0.5)
    tails.append((int(below[0]), -1.0, float(qs[below[0]]) * share) if below.size else None)
    tails.append((int(above[-1]), 1.0, float(1.0 - qs[above[-1]]) * share) if above.size else None)
    lo, hi = np.log(st.bounds[0]), np.log(st.bounds[1])
    logf = [0.0, 0.0]
    for c, sp, a in reversed(rows):  # oldest first
        ok = np.isfinite(a)
        if not ok.any():
            continue
        for t, tail in enumerate(tails):
            if tail is None:
                continue
            row, sign, aim = tail
            edge = c[ok] + np.exp(logf[t]) * sp[row][ok]
            miss = float(np.mean(sign * (a[ok] - edge) > 0.0))
            logf[t] = float(np.clip(logf[t] + st.step * (miss - aim), lo, hi))
    return float(np.exp(logf[0])), float(np.exp(logf[1]))


def _tails(qs: FloatArray, share: float) -> list[tuple[int, float, float] | None]:
    below, above = np.flatnonzero(qs < 0.5), np.flatnonzero(qs > 0.5)
    return [
        (int(below[0]), -1.0, float(qs[below[0]]) * share) if below.size else None,
        (int(above[-1]), 1.0, float(1.0 - qs[above[-1]]) * share) if above.size else None,
    ]


def _wquantile(x: FloatArray, w: FloatArray, q: float) -> float:
    order = np.argsort(x, kind="stable")
    cw = np.cumsum(w[order])
    i = int(np.searchsorted(cw, q * cw[-1] - 1e-12))
    return float(x[order][min(i, len(x) - 1)])


def conformal_tail_factors(
    rows: Sequence[tuple[FloatArray, FloatArray, FloatArray]],
    quantiles: Sequence[float],
    st: AciSettings = AciSettings(),
) -> tuple[float, float]:
    """(lower, upper) multipliers by weighted split conformal over the tracked windows ``rows`` (newest first):
    per tail, the score of an actual is its distance beyond the median in units of the tail's half-band
    (scale-free), and the multiplier is the weighted ``1 - aim`` quantile of the scores (window weight
    ``decay ** age``); ``pool="windows"``: the weighted median over the windows of each window's own quantile."""
    qs = np.asarray(quantiles, dtype=np.float64)
    out = [1.0, 1.0]
    for t, tail in enumerate(_tails(qs, (1.0 - st.target) / 0.2)):
        if tail is None:
            continue
        row, sign, aim = tail
        per_w: list[tuple[FloatArray, float]] = []
        for age, (c, sp, a) in enumerate(rows[: st.windows]):
            ok = np.isfinite(a)
            if not ok.any():
                continue
            d = sign * (a[ok] - c[ok])
            half = sign * sp[row][ok]
            with np.errstate(divide="ignore", invalid="ignore"):
                s = np.where(half > 1e-12, d / np.maximum(half, 1e-12), np.where(d > 0, np.inf, -np.inf))
            per_w.append((s, st.decay**age))
        if not per_w:
            continue
        if st.pool == "points":
            x = np.concatenate([s for s, _ in per_w])
            w = np.concatenate([np.full(len(s), wt) for s, wt in per_w])
            f = _wquantile(x, w, 1.0 - aim)
        else:
            fs = np.array([float(np.quantile(s, 1.0 - aim, method="inverted_cdf")) for s, _ in per_w])
            f = _wquantile(fs, np.array([wt for _, wt in per_w]), 0.5)
        out[t] = float(np.clip(f, st.bounds[0], st.bounds[1]))
    return out[0], out[1]
