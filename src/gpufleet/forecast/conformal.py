"""Forecasts recalibrated from their own tracked errors: model choice and intervals by measured accuracy.

:class:`CalibratedForecaster` is the feedback loop of the forecasting stage made into a forecaster. On a history
``y`` and a horizon ``h`` it replays what tracking would have recorded: at the ``windows`` most recent origins
``n - h, n - 2h, ...`` (phase-aligned with the forecast it stands in for) every candidate model is fitted on
the data before the origin and its forecast is scored against what followed (the residuals an
:class:`~gpufleet.forecast.tracking.AccuracyTracker` would hold once the actuals arrive). Then:

1. **Model choice per series**: the candidate with the lowest *recalibrated* pinball loss on the ``windows``
   most recent tracked windows, each window scored with the pinball factor learnt on the other windows
   (leave-one-window-out, so a model is not rewarded for fitting its own calibration data); another candidate
   replaces the first (gpufleet's own ensemble) if it is better by ``switch_margin`` (default
   :data:`SWITCH_MARGIN`, 10% on :data:`CHOICE_WINDOWS` = 4 windows since session 28; margin 0 in sessions 10-27,
   with 5 windows in sessions 11-27).
2. **Intervals per series** (``interval="aci"``, the default): adaptive conformal multipliers of the chosen
   model's band, one per tail, run over its most recent ``aci.windows`` tracked windows
   (:func:`gpufleet.forecast.aci.aci_tail_factors`): narrowing as well as widening. ``interval="conformal"``:
   weighted split conformal over them instead (:func:`gpufleet.forecast.aci.conformal_tail_factors`, a bench
   setting). ``interval="widen"`` (the rule
   before session 10): the band around the median (``f_q - f_0.5`` for every level) is multiplied by the factor
   in ``FACTORS`` (1.0-4.0: widening only), per block of forecast steps, with the lowest pinball loss over the
   windows (errors in units of the level at each origin, the mean of the last shortest season, so a level shift
   between windows does not rescale the band). Quantiles are sorted so they never cross and floored at zero
   (demand is non-negative).

With fewer than ``min_windows`` windows that fit in the history (at least two shortest seasons of training
data before each origin), the first candidate is used as it is (reason ``too_little_history``). The choice and
multipliers are kept as data (``chosen_``, ``reason_``, ``scores_`` and ``window_scores_``: each candidate's
recalibrated pinball, mean and per tracked window, newest first; ``factors_`` per quantile row and step,
``tail_factors_``). One setting for every series; the traces that chose it are listed in
docs/benchmarks/generalize.md.

**Cost.** Each candidate is fitted at every tracked origin and at the forecast origin: ``len(candidates) x
(windows + 1)`` fits, plus the chosen one at up to ``aci.windows - windows`` older origins. ``max_history`` bounds the data each fit sees (the most recent steps before its origin)
and a :class:`ForecastMemo` reuses fits: a fit's forecast depends only on the data it saw, the candidate, the
horizon and the levels, so it is stored under those and a later call on a longer history finds the tracked
windows it needs already forecast (the forecast it made at those origins). With a memo every candidate is
forecast at the forecast origin too, so a caller that forecasts every ``h`` steps (the simulator: a week of hours
every week) pays ``len(candidates)`` fits per call after the first.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Self

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.aci import INTERVAL_RULES, AciSettings, aci_tail_factors, conformal_tail_factors
from gpufleet.forecast.base import ForecastModel
from gpufleet.forecast.metrics import seasonal_naive_scale
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray, check_quantiles, make_forecast
from gpufleet.ports import DemandForecast

#: Candidate spread factors of the ``widen`` recalibration and of the model choice's scores (1 = the model's own band).
#: Widening only: on the development traces (ServeGen m-large/m-mid, Helios demand) a factor below 1 chosen on
#: the last days narrowed bands that the next day broke (coverage 0.57-0.63 instead of 0.77-0.80), while the
#: held-out failures of issue 21 were mostly bands too narrow (coverage 0.55-0.70).
FACTORS: tuple[float, ...] = tuple(float(x) for x in np.round(np.exp(np.linspace(0.0, np.log(4.0), 15)), 4))


#: The default model-choice margin: another candidate replaces the ensemble only if its recalibrated tracked
#: pinball is 10% lower. Since session 28 (0 in sessions 10-27, the bench settings ``calibrated_margin0`` and
#: ``calibrated_margin0_w4``): with the OpenB series in, ``bench generalize``'s forecast stage chooses it on all
#: 23 series (19 passes each, mean pinball ratio 0.848 against margin 0's 0.867; docs/benchmarks/generalize.md).
SWITCH_MARGIN = 0.1

#: Tracked windows that choose the model (4; 5 in sessions 11-27 with margin 0, where 4 let one day decide
#: ServeGen m-mid's first test day: seasonal naive 5.6% ahead on 4 windows, which the 10% margin does not follow).
CHOICE_WINDOWS = 4


def block_edges(h: int, blocks: int) -> list[tuple[int, int]]:
    """``blocks`` contiguous step ranges covering ``0 .. h - 1`` (fewer when ``h < blocks``)."""
    b = max(1, min(blocks, h))
    cuts = np.linspace(0, h, b + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in itertools.pairwise(cuts) if hi > lo]


def _pinball(actual: FloatArray, values: FloatArray, quantiles: Sequence[float]) -> float:
    ok = np.isfinite(actual)
    if not ok.any():
        return float("nan")
    diff = actual[None, ok] - values[:, ok]
    qs = np.asarray(quantiles)[:, None]
    return float(np.mean(np.maximum(qs * diff, (qs - 1.0) * diff)))


def _nanmean(xs: Sequence[float] | FloatArray) -> float:
    """Mean of the finite values; NaN (without a warning) when there is none (a window of gaps only)."""
    a = np.asarray(xs, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


class ForecastMemo:
    """Forecasts already made, keyed by what determines them (see module docstring): a bounded LRU store.
    ``hits`` / ``misses`` count look-ups (the cost a caller saved / paid)."""

    def __init__(self, size: int = 512) -> None:
        if size < 1:
            raise ValidationError("memo_size", f"must be >= 1, got {size}")
        self.size = size
        self._store: OrderedDict[tuple[object, ...], DemandForecast] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(tag: str, name: str, hist: FloatArray, h: int, qs: tuple[float, ...]) -> tuple[object, ...]:
        digest = hashlib.blake2b(np.ascontiguousarray(hist).tobytes(), digest_size=16).digest()
        return (tag, name, len(hist), digest, h, qs)

    def get(self, key: tuple[object, ...]) -> DemandForecast | None:
        fc = self._store.get(key)
        if fc is None:
            self.misses += 1
            return None
        self.hits += 1
        self._store.move_to_end(key)
        return fc

    def put(self, key: tuple[object, ...], fc: DemandForecast) -> None:
        self._store[key] = fc
        self._store.move_to_end(key)
        while len(self._store) > self.size:
            self._store.popitem(last=False)

    def __len__(self) -> int:
        return len(self._store)


class CalibratedForecaster:
    """Chooses among ``candidates`` (name -> factory, first = default) and recalibrates its quantiles on the
    series' own recent errors (see module docstring). ``season``: shortest season in steps (0 = none);
    ``max_history``: most recent steps each fit sees (None = all); ``memo``: reuse of fits across calls; ``tag``
    names the candidate set in memo keys (forecasters with different candidates may share a memo)."""

    name = "gpufleet"

    def __init__(
        self,
        candidates: Mapping[str, Callable[[], ForecastModel]],
        *,
        season: int = 0,
        windows: int = CHOICE_WINDOWS,
        min_windows: int = 2,
        blocks: int = 1,
        switch_margin: float = SWITCH_MARGIN,
        factors: Sequence[float] = FACTORS,
        max_history: int | None = None,
        memo: ForecastMemo | None = None,
        tag: str = "",
        interval: str = "aci",
        aci: AciSettings | None = None,
    ) -> None:
        if not candidates:
            raise ValidationError("candidates", "at least one candidate model is needed")
        if windows < 1 or min_windows < 1 or blocks < 1:
            raise ValidationError("windows", "windows, min_windows and blocks must be >= 1")
        if max_history is not None and max_history < 3:
            raise ValidationError("max_history", f"must be >= 3 steps (or None), got {max_history}")
        self.candidates = dict(candidates)
        self.season = max(int(season), 0)
        self.windows = windows
        self.min_windows = min_windows
        self.blocks = blocks
        self.switch_margin = switch_margin
        self.factors = tuple(factors)
        self.max_history = max_history
        self.memo = memo
        self.tag = tag
        if interval not in INTERVAL_RULES:
            raise ValidationError("interval", f"choose from {', '.join(INTERVAL_RULES)}; got {interval!r}")
        self.interval = interval
        self.aci = aci or AciSettings()

    def _forecast(self, name: str, hist: FloatArray, h: int, qs: tuple[float, ...]) -> DemandForecast:
        """Candidate ``name`` fitted on ``hist`` (its last ``max_history`` steps), ``h`` steps ahead; memoised."""
        if self.max_history is not None:
            hist = hist[-self.max_history :]
        key = ForecastMemo.key(self.tag, name, hist, h, qs) if self.memo is not None else None
        if key is not None and self.memo is not None and (hit := self.memo.get(key)) is not None:
            return hit
        fc = self.candidates[name]().fit(hist).predict(h, qs)
        if key is not None and self.memo is not None:
            self.memo.put(key, fc)
        return fc

    def fit(self, y: FloatArray) -> Self:
        arr = np.asarray(y, dtype=np.float64).ravel()
        if not np.isfinite(arr).any():
            raise ValidationError("y", "every point is a gap (NaN); nothing to forecast from")
        self.y_ = arr
        self.chosen_ = next(iter(self.candidates))
        self.reason_ = "not_predicted_yet"
        self.factors_: FloatArray = np.zeros((0, 0))
        self.tail_factors_: tuple[float, float] = (1.0, 1.0)
        return self

    def _level(self, hist: FloatArray) -> float:
        tail = hist[-max(self.season, 24) :]
        tail = np.abs(tail[np.isfinite(tail)])
        lvl = float(tail.mean()) if tail.size else 0.0
        # floored: a subnormal level (a history of ~1e-300s) would overflow the scaled windows
        return max(lvl if lvl > 0 else seasonal_naive_scale(hist, max(self.season, 1)), 1e-9)

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        qs = check_quantiles(quantiles)
        y = self.y_
        n = len(y)
        min_train = max(2 * self.season, 3)
        origins = [n - k * h for k in range(1, self.windows + 1) if n - k * h >= min_train]
        first = next(iter(self.candidates))
        if len(origins) < self.min_windows:
            self.chosen_, self.reason_ = first, "too_little_history"
            return self._final(first, h, qs, None)
        edges = block_edges(h, self.blocks)
        # per candidate and window: (centre (h,), spread (levels, h), actual (h,)), in level units
        tracked: dict[str, list[tuple[FloatArray, FloatArray, FloatArray]]] = {}
        for name in self.candidates:
            rows = self._tracked(name, origins, h, qs)
            if len(rows) == len(origins):
                tracked[name] = rows
        if first not in tracked:
            self.chosen_, self.reason_ = first, "calibration_failed"
            return self._final(first, h, qs, None)
        scores = {}
        window_scores: dict[str, list[float]] = {}
        tables_of: dict[str, list[FloatArray]] = {}
        for name, rows in tracked.items():
            tables = tables_of[name] = [window_losses(rows, qs, lo, hi, self.factors) for lo, hi in edges]
            losses = []
            for j in range(len(rows)):  # window j scored with the factors learnt on the other windows
                lam = np.ones(h)
                for (lo, hi), tab in zip(edges, tables, strict=True):
                    lam[lo:hi] = _pick(np.delete(tab, j, axis=0), self.factors)
                c, sp, a = rows[j]
                losses.append(_pinball(a, c[None, :] + lam[None, :] * sp, qs))
            scores[name] = _nanmean(losses) if np.isfinite(losses).any() else np.inf
            window_scores[name] = losses
        best = first
        for name in tracked:  # another model must beat the default by the margin (its lead is measured on few days)
            if scores[name] < (1.0 - self.switch_margin) * scores[first] and scores[name] < scores[best]:
                best = name
        self.chosen_ = best
        self.reason_ = "lowest_tracked_pinball" if best != first else "default_most_accurate"
        self.scores_ = scores
        self.window_scores_ = window_scores
        if self.interval in ("aci", "conformal"):
            more = [n - k * h for k in range(1, self.aci.windows + 1) if n - k * h >= min_train]
            rows = (tracked[best] + self._tracked(best, more[len(origins) :], h, qs))[: self.aci.windows]
            rule = aci_tail_factors if self.interval == "aci" else conformal_tail_factors
            lo_f, hi_f = rule(rows, qs, self.aci)
            self.tail_factors_ = (lo_f, hi_f)
            lev = np.asarray(qs)
            fac = np.where(lev < 0.5, lo_f, np.where(lev > 0.5, hi_f, 1.0))[:, None] * np.ones((1, h))
            return self._final(best, h, qs, fac)
        lam = np.ones(h)
        for (lo, hi), tab in zip(edges, tables_of[best], strict=True):  # = spread_factors(tracked[best], ...)
            lam[lo:hi] = _pick(tab, self.factors)
        return self._final(best, h, qs, np.ones((len(qs), 1)) * lam[None, :])

    def _tracked(
        self, name: str, origins: Sequence[int], h: int, qs: tuple[float, ...]
    ) -> list[tuple[FloatArray, FloatArray, FloatArray]]:
        """Candidate ``name``'s tracked windows at ``origins`` (newest first), as (centre ``(h,)``, spread ``(levels,
        h)``, actual ``(h,)``) in units of the level at each origin; stops at the first origin the model refuses."""
        y = self.y_
        rows = []
        for o in origins:
            hist = y[:o]
            try:
                fc = self._forecast(name, hist, h, qs)
            except ValidationError:
                break
            lvl = self._level(hist)
            c = _centre(fc)
            rows.append((c / lvl, (fc.values - c[None, :]) / lvl, y[o : o + h] / lvl))
        return rows

    def _final(self, name: str, h: int, qs: tuple[float, ...], factors: FloatArray | None) -> DemandForecast:
        fc = self._forecast(name, self.y_, h, qs)
        if self.memo is not None:  # the others too: the next call (h steps on) finds them as its tracked windows
            for other in self.candidates:
                if other != name:
                    with contextlib.suppress(ValidationError):  # a candidate that refuses is not tracked
                        self._forecast(other, self.y_, h, qs)
        self.factors_ = np.ones((len(qs), h)) if factors is None else factors
        c = _centre(fc)
        values = c[None, :] + self.factors_ * (fc.values - c[None, :])
        return make_forecast(fc.mean, values, qs, f"{self.name}:{name}", floor=0.0)


def _centre(fc: DemandForecast) -> FloatArray:
    qs = fc.levels
    return fc.at(0.5) if qs[0] <= 0.5 <= qs[-1] else np.asarray(fc.mean, dtype=np.float64)


def window_losses(
    rows: Sequence[tuple[FloatArray, FloatArray, FloatArray]],
    quantiles: Sequence[float],
    lo: int,
    hi: int,
    factors: Sequence[float] = FACTORS,
) -> FloatArray:
    """``(windows, factors)``: the pinball loss (mean over levels and observed steps ``lo .. hi - 1``) of each
    tracked window (centre, spread, actual) with its band scaled by each factor; NaN for a window without an
    observed actual there. Vectorised: the simulator pays this on every forecast."""
    c = np.stack([r[0][lo:hi] for r in rows])  # (W, n)
    sp = np.stack([r[1][:, lo:hi] for r in rows])  # (W, L, n)
    a = np.stack([r[2][lo:hi] for r in rows])  # (W, n)
    f = np.asarray(factors, dtype=np.float64)[:, None, None, None]
    ok = np.isfinite(a)
    diff = np.where(ok, a, 0.0)[None, :, None, :] - (c[None, :, None, :] + f * sp[None])  # (K, W, L, n)
    qs = np.asarray(quantiles, dtype=np.float64)[None, None, :, None]
    loss = np.where(ok[None, :, None, :], np.maximum(qs * diff, (qs - 1.0) * diff), 0.0).sum(axis=(2, 3))
    n = ok.sum(axis=1) * len(quantiles)  # (W,)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(n[None, :] > 0, loss / np.maximum(n, 1)[None, :], np.nan)
    return np.asarray(out.T, dtype=np.float64)


def _pick(table: FloatArray, factors: Sequence[float]) -> float:
    """The factor with the lowest mean loss over the windows that have one (ties: the first); 1 if none has."""
    best, best_loss = 1.0, np.inf
    for k, f in enumerate(factors):
        loss = _nanmean(table[:, k])
        if np.isfinite(loss) and loss < best_loss - 1e-12:
            best, best_loss = f, loss
    return float(best)


def spread_factors(
    rows: Sequence[tuple[FloatArray, FloatArray, FloatArray]],
    quantiles: Sequence[float],
    edges: Sequence[tuple[int, int]],
    factors: Sequence[float] = FACTORS,
) -> FloatArray:
    """Per step ``(h,)``: for each block, the factor on the band around the median with the lowest pinball loss
    over the tracked windows ``rows`` (centre, spread, actual); 1 where a block has no observed actual."""
    out = np.ones(len(rows[0][0]))
    for lo, hi in edges:
        out[lo:hi] = _pick(window_losses(rows, quantiles, lo, hi, factors), factors)
    return out


def default_candidates(seasons: Sequence[int]) -> dict[str, Callable[[], ForecastModel]]:
    """gpufleet's candidate models, default first: the auto-routed ensemble, then seasonal naive (shortest
    season) and naive (MSTL was dropped: 4x the cost of the others per fit, and the ensemble beat it on every
    development trace); the statsforecast ones are imported when first built."""
    from gpufleet.forecast import baselines
    from gpufleet.forecast.auto import AutoForecaster

    ss = tuple(seasons)
    base = min(ss) if ss else 1
    return {
        "auto": lambda: AutoForecaster(ss),
        "seasonal_naive": lambda: baselines.seasonal_naive(base),
        "naive": baselines.naive,
    }


def calibrated_forecaster(
    seasons: Sequence[int],
    *,
    max_history: int | None = None,
    memo: ForecastMemo | None = None,
    interval: str = "aci",
    switch_margin: float = SWITCH_MARGIN,
    windows: int = CHOICE_WINDOWS,
    aci: AciSettings | None = None,
) -> CalibratedForecaster:
    """The default :class:`CalibratedForecaster` for a grid with these ``seasons`` (steps); ``interval`` and
    ``switch_margin``, ``windows`` (tracked windows that choose the model) and ``aci`` (the band's recalibration
    settings) select the benchmark's other settings (``bench.forecast.GPUFLEET_SETTINGS``)."""
    ss = tuple(seasons)
    return CalibratedForecaster(
        default_candidates(ss),
        season=min(ss) if ss else 0,
        max_history=max_history,
        memo=memo,
        tag=f"default{ss}",
        interval=interval,
        switch_margin=switch_margin,
        windows=windows,
        aci=aci,
    )
