"""The serving-demand model: an ensemble of seasonal components, weighted on rolling validation windows, with
empirically calibrated quantiles.

How ``predict(h)`` works on a history ``y`` (gaps filled first, see :mod:`gpufleet.forecast.gaps`); the work is
done on the first ``predict`` for a given ``h`` and cached, since calibration depends on the horizon:

1. Rolling in-sample origins: when the history holds at least ``max_origins // 2`` whole shortest seasons after
   the first two, the origins are phase-aligned (``n - base``, ``n - 2 * base``, ... back from the end, at most
   ``max_origins``), so every validation window starts at the same time of day as the forecast it stands in for;
   shorter histories (too few aligned windows to weigh on: with 8-12 of them the weights over-react) use up to
   ``max_origins`` origins spread from two seasons in to the end of the history. At each, every component
   (:func:`gpufleet.forecast.components.default_components`: naive, recent means, seasonal naive/means, level +
   seasonal profile per season) forecasts up to ``h`` steps from the data before it. ``phase_aligned=False``
   always uses the spread origins.
2. Weights per block of steps: the horizon is cut into blocks of doubling length ([0,1), [1,2), [2,4), ...); on
   each block, each component's MAE (whole-block windows) is taken relative to naive's MAE on the same windows
   (errors in units of the level at each origin = the mean over the last ``level_seasons`` seasons, so one odd day
   does not rescale everything; recent origins weigh more, half-life ``recency_halflife`` origins); component
   ``i`` gets ``(best / MAE_i) ** weight_power``, zero if worse than ``prune_ratio`` x the best. Block weights are
   interpolated in log-step, so the first steps lean on the latest level and later ones on seasonal shapes
   (``step_weights=False``: one set of weights for the whole horizon). The point forecast is the weighted mean.
3. Intervals: the ensemble's own in-sample errors ``e`` (in units of the level at each origin) are modelled as
   ``e = s(k) * g(f) * z``: ``s(k)`` a per-step scale (smoothed, non-decreasing, sqrt growth past the longest step
   seen), ``g(f) = (f / level + 0.1) ** gamma`` lets the spread follow the forecast (gamma 0 = additive, 0.5 =
   count-like, 1 = proportional; the gamma with the lowest in-sample pinball loss is kept), and ``z`` has the
   empirical distribution of the standardized errors. Because errors inside one horizon are strongly correlated,
   the calibration set holds only ``n_eff ~ (n - 2 * season) / h`` independent windows, so the spread of ``z``
   around its median is widened by the ratio of the Student-t(n_eff - 1) to the normal 90% quantile (-> 1.0 for
   long histories). Quantile ``q`` = ``f + level * s(k) * g(f) * d * z_q``, floored at zero; sorted, so never
   crossing. ``d = (D + d0) ** delta`` widens the band when the components disagree: ``D`` is the standard
   deviation of the components' forecasts at the origin (averaged over the steps, in level units; large right
   after a level shift, when the latest level and the seasonal memory tell different stories), ``d0`` a quarter
   of its in-sample median. ``delta`` in ``deltas`` (0 = off, 0.5, 1) is chosen together with ``gamma`` by the
   in-sample pinball loss, so the factor is used only where disagreement did go with larger errors in-sample.
   ``calib_halflife`` (origins; default off) weights recent calibration windows more: it moved coverage toward 80%
   on some traces and away on others (docs/benchmarks/forecast.md), so it is not the default.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Self

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.components import default_components
from gpufleet.forecast.gaps import fill_gaps, mark_gaps, mark_outliers
from gpufleet.forecast.quantiles import (
    DEFAULT_QUANTILES,
    FloatArray,
    check_quantiles,
    make_forecast,
)
from gpufleet.ports import DemandForecast


class ServingForecaster:
    """Multi-seasonal ensemble with calibrated quantiles. ``seasons``: season lengths in steps, shortest first."""

    name = "gpufleet"

    def __init__(
        self,
        seasons: Sequence[int] = (),
        *,
        max_origins: int = 40,
        recency_halflife: float = 30.0,
        prune_ratio: float = 1.5,
        detect_zero_gaps: bool = True,
        gammas: Sequence[float] = (0.0, 0.5, 1.0),
        deltas: Sequence[float] = (0.0, 0.5, 1.0),
        weight_power: float = 6.0,
        widen: float | None = None,
        min_origins: int = 3,
        clip_outliers: bool = True,
        level_seasons: int = 7,
        calib_halflife: float | None = None,
        step_weights: bool = True,
        phase_aligned: bool = True,
    ) -> None:
        self.phase_aligned = phase_aligned
        self.step_weights = step_weights
        self.calib_halflife = calib_halflife
        self.level_seasons = level_seasons
        self.clip_outliers = clip_outliers
        self.min_origins = min_origins
        self.widen = widen
        self.weight_power = weight_power
        self.gammas = tuple(gammas)
        self.deltas = tuple(deltas)
        self.seasons = tuple(sorted(int(s) for s in seasons if int(s) > 1))
        self.max_origins = max_origins
        self.recency_halflife = recency_halflife
        self.prune_ratio = prune_ratio
        self.detect_zero_gaps = detect_zero_gaps

    def fit(self, y: FloatArray) -> Self:
        arr = np.asarray(y, dtype=np.float64).ravel()
        if arr.size < 3:
            raise ValidationError("y", f"need at least 3 points to forecast, got {arr.size}")
        base = self.seasons[0] if self.seasons else 1
        gaps = mark_gaps(arr, max(3, base)) if self.detect_zero_gaps else ~np.isfinite(arr)
        if self.clip_outliers:
            gaps |= mark_outliers(np.where(gaps, np.nan, arr))
        if gaps.all():
            raise ValidationError("y", "every point is a gap (NaN); nothing to forecast from")
        self.y_ = fill_gaps(arr, gaps, base)
        # seasons the history can support (two full cycles)
        self.seasons_ = tuple(s for s in self.seasons if 2 * s <= len(self.y_))
        self.components_ = [c for c in default_components(self.seasons_) if c.min_history < len(self.y_)]
        # h -> (weights (components, h), scale per step, z table, gamma, delta, d0)
        self._cache: dict[int, tuple[FloatArray, FloatArray, FloatArray, float, float, float]] = {}
        return self

    def _level(self, y: FloatArray) -> float:
        """The unit of errors: mean absolute value over the last ``level_seasons`` shortest seasons."""
        base = self.seasons_[0] if self.seasons_ else 7
        return float(np.mean(np.abs(y[-base * self.level_seasons :]))) + 1e-9

    def _calibrate(self, h: int) -> tuple[FloatArray, FloatArray, FloatArray, float, float, float]:
        """(weights per component, error scale per step, standardized error quantile table, gamma, delta, d0)."""
        if h in self._cache:
            return self._cache[h]
        y = self.y_
        n = len(y)
        comps = self.components_
        base = self.seasons_[0] if self.seasons_ else 1
        min_train = max(3, 2 * base)
        if n - min_train < 2:
            # too short to validate: equal weights, a naive error scale
            w = np.full((len(comps), h), 1.0 / len(comps))
            d = np.abs(np.diff(y))
            unit = float(np.mean(d)) / self._level(y) if d.size else 0.1
            scale = np.maximum(unit, 0.05) * np.sqrt(np.arange(1, h + 1))
            z = np.array([[-1.2816, 0.0, 1.2816], [0.1, 0.5, 0.9]])
            self._cache[h] = (w, scale, z, 0.0, 0.0, 0.0)
            return self._cache[h]
        origins = self._origins(n, min_train, base)
        fcs = np.full((len(comps), len(origins), h), np.nan)
        actual = np.full((len(origins), h), np.nan)
        lvls = np.empty(len(origins))
        for j, o in enumerate(origins):
            hist = y[:o]
            k = min(h, n - o)
            lvls[j] = self._level(hist)
            actual[j, :k] = y[o : o + k]
            for i, c in enumerate(comps):
                if c.min_history <= o:
                    fcs[i, j, :k] = c.fn(hist, k)
        err = (actual[None] - fcs) / lvls[None, :, None]
        # recency weights over origins
        age = (len(origins) - 1 - np.arange(len(origins))).astype(float)
        rw = 0.5 ** (age / self.recency_halflife)
        edges = _step_buckets(h) if self.step_weights else [0, h]
        w = np.zeros((len(comps), h))
        for lo, hi in itertools.pairwise(edges):
            w[:, lo:hi] = self._weigh(err[:, :, lo:hi], rw, full=origins + hi <= n)[:, None]
        if self.step_weights:
            w = _smooth_weights(w, edges)
        # ensemble errors: components missing at an origin are renormalized out
        present = np.isfinite(err)
        wsum = np.einsum("ck,cok->ok", w, present.astype(float))
        ens_fc = np.einsum("ck,cok->ok", w, np.where(present, fcs, 0.0))
        with np.errstate(invalid="ignore", divide="ignore"):
            ens_fc = np.where(wsum > 0, ens_fc / wsum, np.nan)  # (o, h)
        e_rel = (actual - ens_fc) / lvls[:, None]
        f_rel = np.maximum(ens_fc, 0.0) / lvls[:, None]
        cw = 0.5 ** (age / self.calib_halflife) if self.calib_halflife else np.ones(len(origins))
        # disagreement of the components at each origin (level units): large when the latest level and the
        # seasonal memory tell different stories, e.g. right after a level shift
        spread_o = _component_spread(fcs, present) / lvls
        d0 = _D0_SHARE * float(np.nanmedian(spread_o)) if np.isfinite(spread_o).any() else 0.0
        best_fit: tuple[float, float, float, FloatArray, FloatArray] | None = None
        for gamma, delta in itertools.product(self.gammas, self.deltas):
            local = _local(f_rel, gamma) * _disagreement(spread_o, d0, delta)[:, None]
            scale, z = _error_model(e_rel, local, h, cw)
            loss = _in_sample_pinball(e_rel, local, scale, z)
            if best_fit is None or loss < best_fit[0] - 1e-12:
                best_fit = (loss, gamma, delta, scale, z)
        assert best_fit is not None
        self._cache[h] = (w, best_fit[3], best_fit[4], best_fit[1], best_fit[2], d0)
        return self._cache[h]

    def _origins(self, n: int, min_train: int, base: int) -> npt.NDArray[np.int_]:
        """Validation origins (index of each window's first forecast point). Phase-aligned -- whole seasons back
        from the end, ``n - j * base``, so every window starts at the same time of day as the real forecast -- when
        the history holds at least ``max_origins // 2`` of them; otherwise (short histories, no season, or
        ``phase_aligned=False``) ``max_origins`` origins spread evenly from ``min_train`` to the end."""
        if self.phase_aligned and base >= 2:
            aligned = np.arange(n - base, min_train - 1, -base)[::-1][-self.max_origins :]
            if len(aligned) >= max(self.min_origins, self.max_origins // 2):
                return np.asarray(aligned, dtype=np.int_)
        n_orig = min(self.max_origins, n - min_train)
        return np.asarray(np.unique(np.linspace(min_train, n - 1, n_orig).round().astype(int)), dtype=np.int_)

    def _weigh(self, err: FloatArray, rw: FloatArray, full: npt.NDArray[np.bool_]) -> FloatArray:
        """Weights of the components from their errors ``(c, o, k)`` on one block of steps (sums to 1)."""
        fin_err = np.isfinite(err)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_origin = np.abs(np.where(fin_err, err, 0.0)).sum(axis=2) / fin_err.sum(axis=2)  # (c, o)
            valid = np.isfinite(per_origin) & np.isfinite(per_origin[0])[None, :]
            if full.sum() >= self.min_origins:
                # judge on whole blocks: truncated windows near the end would favour short-memory components
                valid &= full[None, :]
            # each component is compared with naive (index 0) on the origins where both exist, so a component that
            # only exists late in the history is not judged on easier or harder windows than the others
            num = (np.where(valid, per_origin, 0.0) * rw).sum(axis=1)
            den = (np.where(valid, per_origin[0][None, :], 0.0) * rw).sum(axis=1)
            mae = np.where(valid.sum(axis=1) >= self.min_origins, num / np.maximum(den, 1e-12), np.inf)
        best = float(np.min(mae))
        if not np.isfinite(best):
            # no component has enough validation windows yet: trust them equally
            mae = np.ones(err.shape[0])
            best = 1.0
        floor = max(best, 1e-12)  # a perfect component (constant series) must not zero every weight
        w = np.where(mae <= self.prune_ratio * best + 1e-12, (floor / np.maximum(mae, floor)) ** self.weight_power, 0.0)
        return np.asarray(w / w.sum(), dtype=np.float64)

    def _widen(self, h: int) -> float:
        """Small-sample widening: errors within one horizon are strongly correlated, so the calibration set holds
        only about ``n_eff`` independent windows; widen by the Student-t / normal 90% quantile ratio."""
        if self.widen is not None:
            return self.widen
        from scipy.stats import t as student_t  # here, not at module level: scipy.stats takes ~1 s to import

        base = self.seasons_[0] if self.seasons_ else 1
        n_eff = max(1.0, (len(self.y_) - max(3, 2 * base)) / h)
        return float(student_t.ppf(0.9, max(1.0, n_eff - 1.0)) / student_t.ppf(0.9, 1e6))

    def weights(self, h: int) -> dict[str, float]:
        """Component weights chosen for horizon ``h``, averaged over the steps (after ``fit``)."""
        w = self._calibrate(h)[0].mean(axis=1)
        return {c.name: float(x) for c, x in zip(self.components_, w, strict=True) if x > 0}

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        if h < 1:
            raise ValidationError("horizon", f"must be >= 1, got {h}")
        qs = check_quantiles(quantiles)
        w, scale, z, gamma, delta, d0 = self._calibrate(h)
        y = self.y_
        fcs = np.vstack([c.fn(y, h) for c in self.components_])
        point = np.einsum("ck,ck->k", w, fcs)
        lvl = self._level(y)
        disagree = _disagreement(np.array([np.std(fcs, axis=0).mean() / lvl]), d0, delta)[0]
        zq = np.interp(qs, z[1], z[0]) if z.shape[1] else np.zeros(len(qs))
        if z.shape[1]:
            mid = float(np.interp(0.5, z[1], z[0]))
            zq = mid + self._widen(h) * (zq - mid)
        spread = lvl * scale * _local(np.maximum(point, 0.0) / lvl, gamma) * disagree
        values = point[None, :] + spread[None, :] * np.asarray(zq)[:, None]
        return make_forecast(point, values, qs, self.name, floor=0.0)


def _step_buckets(h: int) -> list[int]:
    """Block edges over the horizon, doubling in length: [0, 1), [1, 2), [2, 4), ... , [.., h)."""
    edges = [0]
    nxt = 1
    while nxt < h:
        edges.append(nxt)
        nxt *= 2
    edges.append(h)
    return edges


def _smooth_weights(w: FloatArray, edges: list[int]) -> FloatArray:
    """Interpolate block weights linearly (in log step) between block centres, so weights do not jump."""
    h = w.shape[1]
    centres = np.array([0.5 * (lo + hi - 1) for lo, hi in itertools.pairwise(edges)])
    blocks = np.array([w[:, lo] for lo in edges[:-1]])  # (b, c)
    x = np.log1p(np.arange(h))
    out = np.vstack([np.interp(x, np.log1p(centres), blocks[:, i]) for i in range(w.shape[0])])
    return np.asarray(out / out.sum(axis=0, keepdims=True), dtype=np.float64)


_OFFSET = 0.1  # keeps the local scale of a forecast near zero away from zero (in units of the level)


def _local(f_rel: FloatArray, gamma: float) -> FloatArray:
    """Error spread as a function of the forecast, relative to the level: ``(f + 0.1) ** gamma``."""
    return np.asarray((np.maximum(f_rel, 0.0) + _OFFSET) ** gamma, dtype=np.float64)


def _disagreement(spread: FloatArray, d0: float, delta: float) -> FloatArray:
    """Interval factor from the components' disagreement: ``(spread + d0) ** delta`` (1 where unknown)."""
    out = (np.maximum(np.nan_to_num(spread, nan=0.0), 0.0) + d0 + 1e-12) ** delta
    return np.asarray(np.where(np.isfinite(spread), out, 1.0), dtype=np.float64)


def _component_spread(fcs: FloatArray, present: npt.NDArray[np.bool_]) -> FloatArray:
    """Per origin: the standard deviation across the components present (>= 2), averaged over the steps where
    it exists; NaN where it never does. ``fcs`` is ``(components, origins, steps)``."""
    cnt = present.sum(axis=0)
    x = np.where(present, fcs, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(axis=0) / cnt
        var = (np.where(present, (x - mean[None]) ** 2, 0.0)).sum(axis=0) / cnt
        ok = cnt >= 2
        sd = np.where(ok, np.sqrt(np.maximum(var, 0.0)), 0.0)
        out = sd.sum(axis=1) / ok.sum(axis=1)
    return np.asarray(np.where(ok.any(axis=1), out, np.nan), dtype=np.float64)


_D0_SHARE = 0.25  # offset of the disagreement factor, as a share of the median in-sample disagreement


def _error_model(e_rel: FloatArray, local: FloatArray, h: int, cw: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per-step scale ``s(k)`` and the quantile table ``[sorted z; cumulative share]`` of ``z = e / (s(k) g(f))``,
    origins weighted by ``cw``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        u = e_rel / local
        fin = np.isfinite(u)
        wts = np.where(fin, cw[:, None], 0.0)
        raw = (np.abs(np.where(fin, u, 0.0)) * wts).sum(axis=0) / wts.sum(axis=0)
    seen = np.isfinite(raw) & (fin.sum(axis=0) > 0)
    last = int(np.flatnonzero(seen)[-1]) + 1 if seen.any() else 0
    scale = np.empty(h)
    if last:
        width = max(1, last // 12)
        sm = np.convolve(np.pad(raw[:last], (width, width), mode="edge"), np.ones(2 * width + 1), "valid")
        sm = np.maximum.accumulate(sm / (2 * width + 1))
        scale[:last] = sm
        if last < h:
            scale[last:] = sm[-1] * np.sqrt(np.arange(last + 1, h + 1) / last)
    else:
        scale[:] = 0.1 * np.sqrt(np.arange(1, h + 1))
    scale = np.maximum(scale, 1e-9)
    zv = (u / scale[None, :])[fin]
    zw = wts[fin]
    order = np.argsort(zv)
    cum = np.cumsum(zw[order])
    table = np.vstack([zv[order], (cum - 0.5 * zw[order]) / cum[-1]]) if zv.size else np.zeros((2, 0))
    return scale, table


_CHECK_Q = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])


def _in_sample_pinball(e_rel: FloatArray, local: FloatArray, scale: FloatArray, z: FloatArray) -> float:
    """Mean pinball loss (level units) of the quantiles this error model implies, on its own calibration errors."""
    if not z.shape[1]:
        return float("inf")
    zq = np.interp(_CHECK_Q, z[1], z[0])
    spread = scale[None, :] * local  # (o, h)
    fin = np.isfinite(e_rel) & np.isfinite(spread)
    e = e_rel[fin]
    sp = spread[fin]
    total = 0.0
    for q, zz in zip(_CHECK_Q, zq, strict=True):
        d = e - sp * zz
        total += float(np.mean(np.maximum(q * d, (q - 1.0) * d)))
    return total / len(_CHECK_Q)
