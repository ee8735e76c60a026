"""Request traces for the replica-autoscaling benchmark, turned into per-step arrivals and work.

Two inputs here (a third, one request per row with a measured service time, is in ``autoscale_requests``):
  * Azure LLM inference format (``TIMESTAMP,ContextTokens,GeneratedTokens``): one row per request; each
    request's work comes from the token-throughput model.
  * The generic series format of request rates (``timestamp,series_id,value``): Poisson arrivals per step
    at the window's rate (piecewise constant inside a window), drawn from a seeded generator; every request
    has the model's default shape. Windows that are data gaps are imputed (see :func:`find_gaps`).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.traces import check_grid, read_series_csv, resample_mean
from gpufleet.autoscale.throughput import ReplicaThroughputModel
from gpufleet.domain.errors import ValidationError

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

AZURE_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")


@dataclass(frozen=True, slots=True)
class ArrivalTrace:
    """Arrivals on a regular grid of ``step_s``.

    count[j] / work_s[j]: requests and replica-seconds of work arriving in step j.
    req_t_s / req_work_s: per-request arrival times and work (request traces only; None for rate series).
    gap_windows: windows of a rate series treated as data gaps and imputed.
    """

    trace_id: str
    step_s: float
    count: I64
    work_s: F64
    mean_work_s: float
    req_t_s: F64 | None = None
    req_work_s: F64 | None = None
    gap_windows: int = 0

    @property
    def duration_s(self) -> float:
        return len(self.count) * self.step_s


def _header(path: Path, text: str) -> list[str]:
    row = next(csv.reader(io.StringIO(text, newline="")), None)
    if row is None:
        raise ValidationError("header", "file is empty", str(path))
    return [c.strip().lower() for c in row]


def load_traces(
    path: str | Path,
    *,
    model: ReplicaThroughputModel,
    seed: int = 0,
    step_s: float | None = None,
    series_id: str | None = None,
    impute_gaps: bool = True,
) -> list[ArrivalTrace]:
    """Read a request trace (Azure format) or a rate series file (one trace per series)."""
    p = Path(path)
    text = read_input_text(p, "trace")
    cols = _header(p, text)
    if all(c in cols for c in AZURE_COLUMNS):
        if series_id is not None:  # not ignored: the whole trace would be replayed as if it had been filtered
            raise ValidationError("series", f"{series_id!r}: an Azure request trace has no series to choose", str(p))
        return [_load_azure(p, text, model, 0.1 if step_s is None else step_s)]
    if all(c in cols for c in ("timestamp", "series_id", "value")):
        series = read_series_csv(p, nonnegative=True)  # a negative rate is refused with its file line
        if series_id is not None:
            if series_id not in series:
                raise ValidationError("series", f"{series_id!r} not in {sorted(series)}", str(p))
            series = {series_id: series[series_id]}
        out = []
        for i, (sid, raw) in enumerate(sorted(series.items())):
            rng = np.random.default_rng([seed, i])
            try:  # on its own regular grid: a missing window is a gap (NaN), not skipped over
                s = resample_mean(raw, raw.step_s)
            except ValidationError as exc:
                raise ValidationError(exc.field, exc.message, exc.location or str(p)) from None
            rates = s.values.astype(np.float64)
            gaps = find_gaps(rates, s.step_s) if impute_gaps else np.isnan(rates)
            out.append(
                rate_trace(
                    f"{p.name}:{sid}", impute(rates, gaps), s.step_s, model, rng, 1.0 if step_s is None else step_s
                )
            )
            out[-1] = _with_gaps(out[-1], int(gaps.sum()))
        return out
    raise ValidationError(
        "header",
        f"neither the Azure request format nor the series format: {cols} (for one request per row with a "
        "measured service time, name its columns: --time-column, --work-column)",
        str(p),
    )


def _with_gaps(t: ArrivalTrace, gaps: int) -> ArrivalTrace:
    return ArrivalTrace(t.trace_id, t.step_s, t.count, t.work_s, t.mean_work_s, t.req_t_s, t.req_work_s, gaps)


def _load_azure(p: Path, text: str, model: ReplicaThroughputModel, step_s: float) -> ArrivalTrace:
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)  # cells as text: no guessing
    except pd.errors.ParserError as exc:  # e.g. "Expected 3 fields in line 5, saw 4"
        msg = str(exc).splitlines()[0].removeprefix("Error tokenizing data. C error: ")
        at = re.search(r"line (\d+)", msg)
        raise ValidationError("row", msg, f"{p}:{at.group(1)}" if at else str(p)) from None
    df.columns = [c.strip().lower() for c in df.columns]
    try:
        t = pd.to_datetime(df["timestamp"].str.strip(), utc=True, format="mixed")
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValidationError("TIMESTAMP", f"unparseable time: {exc}", str(p)) from None
    if t.isna().any():
        raise ValidationError("TIMESTAMP", "missing time", f"{p}:{int(np.argmax(t.isna().to_numpy())) + 2}")
    ctx = pd.to_numeric(df["contexttokens"], errors="coerce").to_numpy(np.float64)
    gen = pd.to_numeric(df["generatedtokens"], errors="coerce").to_numpy(np.float64)
    if len(df) == 0:
        raise ValidationError("rows", "no requests", str(p))
    for name, col in (("ContextTokens", ctx), ("GeneratedTokens", gen)):
        bad = ~np.isfinite(col) | (col < 0)
        if bad.any():
            line = int(np.argmax(bad)) + 2
            raise ValidationError(name, "token counts must be finite non-negative numbers", f"{p}:{line}")
    t_ns = t.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    order = np.argsort(t_ns, kind="stable")
    rel_s = (t_ns[order] - t_ns[order][0]).astype(np.float64) / 1e9
    work = model.work_s(ctx[order], gen[order])
    return request_trace(p.name, rel_s, work, step_s)


def request_trace(trace_id: str, t_s: F64, work_s: F64, step_s: float) -> ArrivalTrace:
    """Bin per-request arrivals (seconds from the start) onto the step grid."""
    n_steps = int(np.floor(t_s[-1] / step_s)) + 1
    check_grid(trace_id, n_steps, step_s)
    idx = np.minimum((t_s / step_s).astype(np.int64), n_steps - 1)
    count = np.bincount(idx, minlength=n_steps).astype(np.int64)
    work = np.bincount(idx, weights=work_s, minlength=n_steps).astype(np.float64)
    return ArrivalTrace(trace_id, step_s, count, work, float(work_s.mean()), t_s, work_s)


def find_gaps(
    rates: F64, window_s: int, *, fraction: float = 0.05, min_requests: float = 100.0
) -> npt.NDArray[np.bool_]:
    """Windows that are data gaps rather than demand.

    A window is a gap when it is NaN, or when its rate is below ``fraction`` of the median of the surrounding
    day (zeros excluded) while that median would put at least ``min_requests`` requests in the window — an
    empty window is then implausible for Poisson traffic (P = e^-100). Genuinely intermittent series (low
    median) never have gaps by this rule.
    """
    n = len(rates)
    gaps = np.isnan(rates)
    half = max(1, round(43_200 / window_s))
    pos = np.where(gaps | (rates <= 0), np.nan, rates)
    for i in range(n):
        w = pos[max(0, i - half) : i + half + 1]
        if np.all(np.isnan(w)):
            continue
        med = float(np.nanmedian(w))
        if med * window_s >= min_requests and not np.isnan(rates[i]) and rates[i] < fraction * med:
            gaps[i] = True
    return gaps


def impute(rates: F64, gaps: npt.NDArray[np.bool_]) -> F64:
    """Linear interpolation across gap windows (edges take the nearest observed value)."""
    out = rates.copy()
    if gaps.any() and (~gaps).any():
        x = np.arange(len(rates))
        out[gaps] = np.interp(x[gaps], x[~gaps], rates[~gaps])
    return np.nan_to_num(out, nan=0.0)


def rate_trace(
    trace_id: str,
    rates_rps: F64,
    window_s: int,
    model: ReplicaThroughputModel,
    rng: np.random.Generator,
    step_s: float = 1.0,
) -> ArrivalTrace:
    """Poisson arrivals per step at each window's rate (piecewise constant), default request shape."""
    per_window = max(1, round(window_s / step_s))
    check_grid(trace_id, len(rates_rps) * per_window, step_s)
    lam = np.repeat(np.maximum(rates_rps, 0.0) * step_s, per_window)
    count = rng.poisson(lam).astype(np.int64)
    w = model.default_work_s
    return ArrivalTrace(trace_id, step_s, count, (count * w).astype(np.float64), w)
