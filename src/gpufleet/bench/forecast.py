"""Forecast benchmark: rolling-origin backtests of ``gpufleet`` against baselines measured in the same run.

Models: ``gpufleet`` (the loop's forecaster, :class:`~gpufleet.forecast.engine.GpufleetForecaster`: the
:class:`~gpufleet.forecast.conformal.CalibratedForecaster` over the
:class:`~gpufleet.forecast.auto.AutoForecaster` and two simple candidates, one instance per series so its fits
are reused across origins; ``gpufleet="raw"``: the AutoForecaster alone), ``naive``, ``seasonal_naive`` (daily
season), ``autoets``, ``mstl`` (daily + weekly seasons where the history holds two cycles) and ``prophet`` when
the package imports. Every model sees the same histories (gaps as NaN) and is scored on the same points.
JIT compilation (numba, used by statsforecast; Stan model loading for Prophet) is paid once per process on a
small warm-up series *before* timing; it is reported separately as ``warmup_s`` so per-series seconds are
steady-state and the one-off cost is not hidden.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np

from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.traces import Series, check_grid, parse_ts, read_series_csv, resample_mean
from gpufleet.domain.errors import ValidationError
from gpufleet.forecast import baselines
from gpufleet.forecast.aci import AciSettings
from gpufleet.forecast.auto import AutoForecaster
from gpufleet.forecast.backtest import BacktestScore, backtest
from gpufleet.forecast.base import ForecastModel
from gpufleet.forecast.engine import GpufleetForecaster
from gpufleet.forecast.loop import DAY_S, seasons_for_step
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray, check_quantiles, make_forecast
from gpufleet.ports import DemandForecast

MODELS = ("gpufleet", "naive", "seasonal_naive", "autoets", "mstl", "prophet")
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


MAX_HORIZON_STEPS = 100_000  # longer horizons are a typo (and would not fit in memory for every quantile)


def parse_duration_s(text: str, field: str = "duration") -> int:
    """``"1d"``, ``"24h"``, ``"10min"``, ``"3600s"`` -> seconds (> 0); ``field`` names the option in errors."""
    t = text.strip().lower()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if t.endswith(unit) and t[: -len(unit)].strip().replace(".", "", 1).isdigit():
            secs = round(float(t[: -len(unit)]) * _UNITS[unit])
            if secs <= 0:
                raise ValidationError(field, f"must be at least 1 s, got {text!r}")
            return secs
    raise ValidationError(field, f"not a duration like 1d, 24h, 10min: {text!r}")


def horizon_steps(text: str, step_s: int) -> int:
    """A horizon given as steps (``"144"``) or as a duration (``"1d"``) -> steps on a ``step_s`` grid."""
    if text.strip().isdigit():
        h = int(text)
    else:
        dur = parse_duration_s(text, "horizon")
        if dur % step_s:
            raise ValidationError("horizon", f"{text} is not a whole number of {step_s}s steps")
        h = dur // step_s
    if not 1 <= h <= MAX_HORIZON_STEPS:
        raise ValidationError("horizon", f"must be 1..{MAX_HORIZON_STEPS:,} steps of {step_s} s, got {h:,} ({text!r})")
    return h


def load_regular(path: str | Path, aggregate_s: int | None = None) -> dict[str, Series]:
    """Read a generic demand series CSV onto a regular grid (missing stamps -> NaN), optionally aggregated by
    mean. A negative value is refused with its file and line (``gpufleet forecast`` and ``bench forecast``)."""
    out = {}
    for sid, s in read_series_csv(path, nonnegative=True).items():
        try:
            if aggregate_s is not None and aggregate_s < s.step_s:
                raise ValidationError(
                    "aggregate", f"{aggregate_s} s is finer than series {sid!r}'s own {s.step_s} s step"
                )
            out[sid] = resample_mean(s, aggregate_s or s.step_s)
        except ValidationError as exc:
            raise ValidationError(exc.field, exc.message, exc.location or str(path)) from None
    return out


def request_rate_series(
    path: str | Path, time_column: str, step_s: int, group_column: str | None = None, top_groups: int = 3
) -> dict[str, Series]:
    """Turn a request log (one row per request, a timestamp column) into request-rate series (requests/s per
    ``step_s`` bucket): ``all`` plus the ``top_groups`` busiest values of ``group_column``. Buckets without a
    request are 0 (no demand); the shared gap rule still treats implausible zeros in a busy series as gaps."""
    p = Path(path)
    stamps: dict[str, list[int]] = {"all": []}
    with io.StringIO(read_input_text(p, "series"), newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or time_column not in reader.fieldnames:
            raise ValidationError(time_column, f"no such column (header is {reader.fieldnames})", str(p))
        if group_column and group_column not in reader.fieldnames:
            raise ValidationError(group_column, f"no such column (header is {reader.fieldnames})", str(p))
        for lineno, row in enumerate(reader, start=2):
            if None in row.values():  # a row cut short: DictReader fills the missing cells with None
                have = sum(v is not None for k, v in row.items() if k is not None)
                raise ValidationError("row", f"expected {len(reader.fieldnames)} fields, got {have}", f"{p}:{lineno}")
            t = parse_ts(row[time_column], f"{p}:{lineno}")
            stamps["all"].append(t)
            if group_column:
                stamps.setdefault(f"{group_column}={row[group_column]}", []).append(t)
    if not stamps["all"]:
        raise ValidationError("rows", "no requests", str(p))
    t0 = min(stamps["all"]) - min(stamps["all"]) % step_s
    n = (max(stamps["all"]) - t0) // step_s + 1
    check_grid("the request log", n, step_s, time_column, str(p))
    ranked = sorted((k for k in stamps if k != "all"), key=lambda k: -len(stamps[k]))[:top_groups]
    out = {}
    for key in ["all", *ranked]:
        counts = np.bincount((np.asarray(stamps[key]) - t0) // step_s, minlength=n).astype(np.float64)
        out[key] = Series(key, t0 + step_s * np.arange(n, dtype=np.int64), counts / step_s)
    return out


class ProphetModel:
    """Prophet (if installed) behind the ForecastModel interface; quantiles from its predictive samples."""

    name = "prophet"

    def __init__(self, t0_s: int, step_s: int, seed: int = 0) -> None:
        self.t0_s = t0_s
        self.step_s = step_s
        self.seed = seed

    def fit(self, y: FloatArray) -> Self:
        import logging

        import pandas as pd
        from prophet import Prophet

        # cmdstanpy resets its own level on use; silence its per-fit chatter instead
        logging.getLogger("cmdstanpy").disabled = True
        logging.getLogger("prophet").setLevel(logging.WARNING)
        ds = pd.to_datetime(self.t0_s + self.step_s * np.arange(len(y)), unit="s")
        self.n_ = len(y)
        self.model_ = Prophet(uncertainty_samples=500).fit(pd.DataFrame({"ds": ds, "y": y}))  # NaN rows dropped
        return self

    def predict(self, h: int, quantiles: Any = DEFAULT_QUANTILES) -> DemandForecast:
        import pandas as pd

        qs = check_quantiles(quantiles)
        ds = pd.to_datetime(self.t0_s + self.step_s * np.arange(self.n_, self.n_ + h), unit="s")
        np.random.seed(self.seed)  # Prophet samples with numpy's global generator; pin it for repeatable runs
        samples = self.model_.predictive_samples(pd.DataFrame({"ds": ds}))["yhat"]
        mean = np.asarray(self.model_.predict(pd.DataFrame({"ds": ds}))["yhat"], dtype=np.float64)
        return make_forecast(mean, np.quantile(samples, qs, axis=1), qs, self.name)


def prophet_available() -> bool:
    try:
        import prophet  # noqa: F401
    except Exception:
        return False
    return True


#: ``gpufleet`` settings: ``calibrated`` (default: the loop's forecaster, model choice on 4 tracked windows with a
#: 10% margin and adaptive conformal tails, :mod:`gpufleet.forecast.engine`), ``calibrated_margin0`` (another model
#: replaces the ensemble as soon as it is lower on 5 windows: the default of sessions 11-27), ``calibrated_margin0_w4``
#: (the same on 4 windows: session 10's), ``calibrated_conformal`` (margin 0 on 5 windows, the band's tails from
#: weighted split conformal over 16 tracked windows, decay 0.85 per window,
#: :func:`gpufleet.forecast.aci.conformal_tail_factors`) or ``raw`` (the auto-routed ensemble alone).
GPUFLEET_SETTINGS = ("calibrated", "calibrated_margin0", "calibrated_margin0_w4", "calibrated_conformal", "raw")
_LOOP_OPTIONS: dict[str, dict[str, Any]] = {
    "calibrated": {},
    "calibrated_margin0": {"choice_windows": 5, "switch_margin": 0.0},
    "calibrated_margin0_w4": {"choice_windows": 4, "switch_margin": 0.0},
    "calibrated_conformal": {
        "choice_windows": 5,
        "switch_margin": 0.0,
        "interval": "conformal",
        "aci": AciSettings(windows=16, decay=0.85, target=0.875),
    },
}


def daily_season(step_s: int) -> int:
    """Steps in a day on a ``step_s`` grid (the baselines' season and the backtest's); 1 when a day is not a whole
    number of at least two steps."""
    return DAY_S // step_s if DAY_S % step_s == 0 and DAY_S // step_s >= 2 else 1


def model_factories(
    step_s: int, t0_s: int, models: tuple[str, ...], gpufleet: str = "calibrated"
) -> dict[str, Callable[[], ForecastModel]]:
    if gpufleet not in GPUFLEET_SETTINGS:
        raise ValidationError("gpufleet", f"choose from {', '.join(GPUFLEET_SETTINGS)}; got {gpufleet!r}")
    seasons = seasons_for_step(step_s)
    daily = daily_season(step_s)
    # one per call (per series in the bench): its memo reuses fits across origins
    loop = GpufleetForecaster(**_LOOP_OPTIONS[gpufleet]) if gpufleet in _LOOP_OPTIONS else None
    table: dict[str, Callable[[], ForecastModel]] = {
        "gpufleet": (lambda: loop.model(step_s)) if loop is not None else (lambda: AutoForecaster(seasons)),
        "naive": baselines.naive,
        "seasonal_naive": lambda: baselines.seasonal_naive(daily),
        "autoets": lambda: baselines.autoets(daily),
        "mstl": lambda: baselines.mstl(seasons or (daily,)),
        "prophet": lambda: ProphetModel(t0_s, step_s),
    }
    return {m: table[m] for m in models if m in table}


@dataclass
class ForecastBenchResult:
    horizon: int
    step_s: int
    n_origins: int
    scores: dict[str, dict[str, BacktestScore]] = field(default_factory=dict)
    warmup_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    t0_s: dict[str, int] = field(default_factory=dict)  # first timestamp of each series (for window dates)

    def to_json(self, per_origin: bool = False) -> dict[str, Any]:
        """The issue's shape: ``{"series": {ID: {MODEL: {"mase", "pinball", "coverage_80", "seconds"}}}}``;
        ``per_origin`` adds each model's window scores under ``"per_origin"`` (start timestamp, metrics)."""

        def entry(sid: str, s: BacktestScore) -> dict[str, Any]:
            out: dict[str, Any] = {
                "mase": s.mase,
                "pinball": s.pinball,
                "coverage_80": s.coverage_80,
                "seconds": s.seconds,
            }
            if per_origin:
                out["per_origin"] = [
                    {
                        "start_s": self.t0_s.get(sid, 0) + w.origin * self.step_s,
                        "mase": w.mase,
                        "pinball": w.pinball,
                        "coverage_80": w.coverage_80,
                    }
                    for w in s.per_origin
                ]
            return out

        return {"series": {sid: {m: entry(sid, s) for m, s in per.items()} for sid, per in self.scores.items()}}


def run_forecast_bench(
    series: dict[str, Series],
    horizon: str,
    *,
    n_origins: int = 4,
    models: tuple[str, ...] = MODELS,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], None] | None = None,
    gpufleet: str = "calibrated",
) -> ForecastBenchResult:
    """Backtest every model on every series (see module docstring)."""
    if n_origins < 4:
        raise ValidationError("n_origins", "the benchmark uses at least 4 origins")
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise ValidationError("models", f"choose from {', '.join(MODELS)}; got {', '.join(models) or 'none'}")
    steps = {s.step_s for s in series.values()}
    if len(steps) != 1:
        raise ValidationError("series", f"all series must share one step, found {sorted(steps)}")
    step_s = steps.pop()
    h = horizon_steps(horizon, step_s)
    daily = daily_season(step_s)
    wanted = tuple(models)
    skipped = {}
    if "prophet" in wanted and not prophet_available():
        wanted = tuple(m for m in wanted if m != "prophet")
        skipped["prophet"] = "package not importable (pip install prophet)"
        if not wanted:  # nothing left to run: an empty table is not a result
            raise ValidationError("models", "prophet is not importable (pip install prophet) and no other model given")
    first = next(iter(series.values()))
    result = ForecastBenchResult(horizon=h, step_s=step_s, n_origins=n_origins, skipped=skipped)
    # warm-up: pay JIT compilation once, on a synthetic series, and report it
    warm = 100 + 10 * np.sin(np.arange(4 * max(daily, 7)) * 2 * np.pi / max(daily, 2))
    for name, make in model_factories(step_s, int(first.t_s[0]), wanted, gpufleet).items():
        t0 = clock()
        make().fit(warm).predict(min(h, 8))
        result.warmup_s[name] = clock() - t0
    for sid, s in series.items():
        factories = model_factories(step_s, int(s.t_s[0]), wanted, gpufleet)
        result.t0_s[sid] = int(s.t_s[0])
        result.scores[sid] = {}
        for name, make in factories.items():
            result.scores[sid][name] = backtest(s.values, make, h, daily, clock, n_origins)
            if progress:
                sc = result.scores[sid][name]
                progress(f"{sid} {name}: mase={sc.mase:.3f} pinball={sc.pinball:.3f} cov80={sc.coverage_80:.2f}")
    return result


def protocol_points(step_s: int, horizon: str, n_origins: int = 4) -> int:
    """The fewest points a series on a ``step_s`` grid needs for ``n_origins`` windows of ``horizon`` after the
    training a backtest asks for (two daily seasons, :func:`gpufleet.forecast.backtest.rolling_origins`)."""
    return n_origins * horizon_steps(horizon, step_s) + max(2 * daily_season(step_s), 3)


def coverage_before(series: Series, horizon: str, n_test: int = 4, days: int = 20) -> tuple[float, int]:
    """(80% coverage, windows) of gpufleet's default setting over up to ``days`` windows of ``horizon`` just
    before the ``n_test`` test windows, scored as the test windows are: the same band judged on more days. A
    coverage test on 4 windows is noisy (docs/benchmarks/generalize.md, "How noisy is the coverage test");
    this is the longer look. (nan, 0) when no window fits."""
    step_s = series.step_s
    h = horizon_steps(horizon, step_s)
    daily = daily_season(step_s)
    y = np.asarray(series.values, dtype=np.float64)[: len(series.values) - n_test * h]
    k = min(days, (len(y) - max(2 * daily, 3)) // h)
    if k < 1:
        return float("nan"), 0
    make = model_factories(step_s, int(series.t_s[0]), ("gpufleet",))["gpufleet"]
    score = backtest(y, make, h, daily, time.perf_counter, k)
    return score.coverage_80, k


EXACT = 1e-9  # a scaled error below this is rounding: the model is exact


def _ratio(mine: float, best: float) -> float:
    """``mine / best``; a baseline with zero error (a flat series) gives 1.0 when we match it, else +inf (JSON
    writers turn a non-finite ratio into null)."""
    if best > EXACT:
        return mine / best
    return 1.0 if mine <= EXACT else math.inf


def verdict(per_model: dict[str, BacktestScore], ours: str = "gpufleet") -> dict[str, Any]:
    """The done-when check for one series: pinball >= 10% below and MASE <= the best baseline, coverage in range."""
    base = {m: s for m, s in per_model.items() if m != ours}
    mine = per_model[ours]
    best_pin = min(base.values(), key=lambda s: s.pinball)
    best_mase = min(base.values(), key=lambda s: s.mase)
    pin_ratio = _ratio(mine.pinball, best_pin.pinball)
    return {
        "pinball_ratio": pin_ratio,
        "mase_ratio": _ratio(mine.mase, best_mase.mase),
        "best_pinball_baseline": next(m for m, s in base.items() if s is best_pin),
        "best_mase_baseline": next(m for m, s in base.items() if s is best_mase),
        "pinball_ok": pin_ratio <= 0.9,
        "mase_ok": mine.mase <= best_mase.mase,
        "coverage_ok": 0.75 <= mine.coverage_80 <= 0.90,
    }


def markdown_table(result: ForecastBenchResult) -> str:
    lines = [
        f"horizon {result.horizon} steps of {result.step_s}s, {result.n_origins} rolling origins",
        "",
        "| series | model | MASE | pinball | coverage_80 | seconds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for sid, per in result.scores.items():
        for m, s in per.items():
            lines.append(f"| {sid} | {m} | {s.mase:.3f} | {s.pinball:.3f} | {s.coverage_80:.2f} | {s.seconds:.2f} |")
    lines += [
        "",
        "| series | pinball / best baseline | MASE / best baseline | coverage_80 | verdict |",
        "|---|---|---|---|---|",
    ]
    for sid, per in result.scores.items():
        if "gpufleet" not in per or len(per) < 2:
            continue
        v = verdict(per)
        ok = v["pinball_ok"] and v["mase_ok"] and v["coverage_ok"]
        lines.append(
            f"| {sid} | {v['pinball_ratio']:.3f} (vs {v['best_pinball_baseline']}) | {v['mase_ratio']:.3f} "
            f"(vs {v['best_mase_baseline']}) | {per['gpufleet'].coverage_80:.2f} | {'PASS' if ok else 'FAIL'} |"
        )
    lines += [
        "",
        "JIT / warm-up seconds (once per process, excluded above): "
        + ", ".join(f"{m}={s:.2f}" for m, s in result.warmup_s.items()),
    ]
    for m, why in result.skipped.items():
        lines.append(f"skipped {m}: {why}")
    return "\n".join(lines)


def per_origin_table(result: ForecastBenchResult) -> str:
    """One row per series and window: each model's ``pinball / MASE / coverage_80`` on that window alone (UTC start
    of the window), and the model with the lowest pinball there."""
    import datetime as dt

    lines = []
    for sid, per in result.scores.items():
        models = list(per)
        lines += [
            f"{sid}: pinball / MASE / coverage_80 per window of {result.horizon} steps",
            "",
            "| window start (UTC) | " + " | ".join(models) + " | best pinball |",
            "|---|" + "---:|" * len(models) + "---|",
        ]
        rows = zip(*(per[m].per_origin for m in models), strict=True)
        for ws in rows:
            start = result.t0_s.get(sid, 0) + ws[0].origin * result.step_s
            when = dt.datetime.fromtimestamp(start, dt.UTC).strftime("%Y-%m-%d %H:%M")
            cells = [f"{w.pinball:.3f} / {w.mase:.2f} / {w.coverage_80:.2f}" for w in ws]
            best = min(range(len(models)), key=lambda i: ws[i].pinball)
            lines.append(f"| {when} | " + " | ".join(cells) + f" | {models[best]} |")
        lines.append("")
    return "\n".join(lines)
