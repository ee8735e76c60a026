"""Forecast accuracy tracking as data: forecasts are recorded with their issue time, scored when their actuals
have arrived, tracked per series over time, and turned into model weights for the next forecast.

Nothing here persists or reads a clock: callers pass ``now_s`` and store :class:`IssuedForecast` /
:class:`AccuracyRecord` wherever they keep things (the service maps them to tables later).

Scoring a forecast (all over its non-missing actuals; missing actuals are NaN):

* ``mase`` = mean |actual - mean forecast| / ``scale``;
* ``pinball`` = mean over the forecast's quantile levels of the mean pinball loss, / ``scale``;
* ``coverage_80`` = share of actuals within the 0.1 and 0.9 quantiles;

where ``scale`` was fixed at issue time (the seasonal naive MAE of the history the forecast saw).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.metrics import coverage, mase, scaled_pinball
from gpufleet.forecast.quantiles import FloatArray
from gpufleet.ports import DemandForecast


@dataclass(frozen=True, slots=True)
class IssuedForecast:
    """One forecast as issued: step ``k`` (0-based) covers time ``start_s + k * step_s``."""

    series_id: str
    model: str
    issued_at_s: int
    start_s: int
    step_s: int
    scale: float
    forecast: DemandForecast

    @property
    def end_s(self) -> int:
        """Time of the last forecast step."""
        return self.start_s + (self.forecast.horizon - 1) * self.step_s

    @classmethod
    def of_quantiles(
        cls,
        series_id: str,
        model: str,
        issued_at_s: int,
        start_s: int,
        step_s: int,
        scale: float,
        levels: tuple[float, ...],
        values: FloatArray,
    ) -> IssuedForecast:
        """A forecast kept as its quantile rows only (``values``: shape ``(len(levels), h)``, as a store keeps
        it): the p50 row is its mean (``levels`` must hold 0.5), ``model`` its method."""
        if 0.5 not in levels:
            raise ValidationError("levels", f"a stored forecast needs its p50 row, got levels {levels}")
        v = np.asarray(values, dtype=np.float64)
        fc = DemandForecast(mean=v[levels.index(0.5)], levels=tuple(levels), values=v, method=model)
        return cls(series_id, model, issued_at_s, start_s, step_s, scale, fc)

    def first_steps(self, n: int) -> IssuedForecast:
        """The same forecast cut to its first ``n`` steps (the ones elapsed so far)."""
        f = self.forecast
        cut = DemandForecast(mean=f.mean[:n], levels=f.levels, values=f.values[:, :n], method=f.method)
        return IssuedForecast(self.series_id, self.model, self.issued_at_s, self.start_s, self.step_s, self.scale, cut)


@dataclass(frozen=True, slots=True)
class AccuracyRecord:
    series_id: str
    model: str
    issued_at_s: int
    scored_at_s: int
    mase: float
    pinball: float
    coverage_80: float
    n_points: int


def score(issued: IssuedForecast, actual: FloatArray) -> tuple[float, float, float, int]:
    """(mase, pinball, coverage_80, n_points) of one forecast against actuals aligned to its steps."""
    a = np.asarray(actual, dtype=np.float64)
    fc = issued.forecast
    if a.shape != (fc.horizon,):
        raise ValidationError("actual", f"expected {fc.horizon} values, got shape {a.shape}")
    cov = coverage(a, fc.at(0.1), fc.at(0.9)) if fc.levels[0] <= 0.1 and fc.levels[-1] >= 0.9 else float("nan")
    return (
        mase(a, fc.mean, issued.scale),
        scaled_pinball(a, fc.values, fc.levels, issued.scale),
        cov,
        int(np.isfinite(a).sum()),
    )


@dataclass
class AccuracyTracker:
    """Pending forecasts, observed actuals and accuracy history, per series."""

    pending: list[IssuedForecast] = field(default_factory=list)
    actuals: dict[str, dict[int, float]] = field(default_factory=dict)
    history: dict[str, list[AccuracyRecord]] = field(default_factory=dict)

    def record(self, issued: IssuedForecast) -> None:
        self.pending.append(issued)

    def observe(self, series_id: str, t_s: Sequence[int], values: Sequence[float], now_s: int) -> list[AccuracyRecord]:
        """Add actuals, then score every pending forecast whose last step is at or before ``now_s``."""
        if len(t_s) != len(values):
            raise ValidationError("values", f"{len(t_s)} timestamps but {len(values)} values")
        store = self.actuals.setdefault(series_id, {})
        for t, v in zip(t_s, values, strict=True):
            store[int(t)] = float(v)
        done: list[AccuracyRecord] = []
        keep: list[IssuedForecast] = []
        for f in self.pending:
            if f.end_s > now_s:
                keep.append(f)
                continue
            obs = self.actuals.get(f.series_id, {})
            grid = f.start_s + f.step_s * np.arange(f.forecast.horizon)
            a = np.array([obs.get(int(t), np.nan) for t in grid])
            m, p, c, n = score(f, a)
            rec = AccuracyRecord(f.series_id, f.model, f.issued_at_s, now_s, m, p, c, n)
            self.history.setdefault(f.series_id, []).append(rec)
            done.append(rec)
        self.pending = keep
        return done

    def summary(self, series_id: str, model: str, last: int = 10) -> dict[str, float]:
        """Mean accuracy of the last ``last`` scored forecasts of ``model`` on ``series_id``."""
        recs = [r for r in self.history.get(series_id, []) if r.model == model and r.n_points > 0][-last:]
        if not recs:
            return {"mase": float("nan"), "pinball": float("nan"), "coverage_80": float("nan"), "n": 0.0}
        return {
            "mase": float(np.nanmean([r.mase for r in recs])),
            "pinball": float(np.nanmean([r.pinball for r in recs])),
            "coverage_80": float(np.nanmean([r.coverage_80 for r in recs])),
            "n": float(len(recs)),
        }

    def model_weights(self, series_id: str, models: Sequence[str], halflife: float = 5.0) -> dict[str, float]:
        """Weights for combining or choosing ``models`` on a series: ``1 / pinball^2`` with recent forecasts
        weighing more (half-life in forecasts). Models without a scored forecast get the mean weight of the
        others (equal weights when none has one). Weights sum to 1."""
        raw: dict[str, float] = {}
        for m in models:
            recs = [r for r in self.history.get(series_id, []) if r.model == m and np.isfinite(r.pinball)]
            if recs:
                age = np.arange(len(recs))[::-1].astype(float)
                w = 0.5 ** (age / halflife)
                pin = float(np.sum(w * np.array([r.pinball for r in recs])) / w.sum())
                raw[m] = 1.0 / max(pin, 1e-9) ** 2
        fill = float(np.mean(list(raw.values()))) if raw else 1.0
        full = {m: raw.get(m, fill) for m in models}
        total = sum(full.values())
        return {m: v / total for m, v in full.items()}

    def select(self, series_id: str, models: Sequence[str], default: str) -> tuple[str, str]:
        """(model, reason code): the best-weighted model once every candidate has been scored, else ``default``."""
        scored = {r.model for r in self.history.get(series_id, [])}
        if not all(m in scored for m in models):
            return default, "not_all_models_scored"
        w = self.model_weights(series_id, models)
        best = max(models, key=lambda m: w[m])
        return best, "lowest_recent_pinball"
