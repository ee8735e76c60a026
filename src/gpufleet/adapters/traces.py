"""Readers for public trace formats. Every reader says which file, line and field is wrong.

Generic series format: CSV with header ``timestamp,series_id,value``; ``timestamp`` ISO-8601 UTC.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpufleet.adapters.inputs import read_input_text
from gpufleet.domain.errors import ValidationError

MAX_GRID_STEPS = 20_000_000  # a regular grid longer than this is a stray timestamp, not a trace


def check_grid(label: str, n_steps: int, step_s: float, field: str = "timestamp", where: str | None = None) -> None:
    """Refuse a regular grid of more than MAX_GRID_STEPS steps (a stray time far from the others, which would
    otherwise allocate gigabytes): every loader that puts times on a grid checks through here."""
    if n_steps > MAX_GRID_STEPS:
        raise ValidationError(
            field,
            f"{label} spans {n_steps:,} steps of {step_s:g} s (at most {MAX_GRID_STEPS:,}): "
            "check for a stray timestamp far from the others",
            where,
        )


@dataclass(frozen=True, slots=True)
class Series:
    """One series on its own time axis: ``t_s`` are UNIX seconds (sorted), ``values`` floats."""

    series_id: str
    t_s: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]

    @property
    def step_s(self) -> int:
        """The regular step, inferred as the most common difference between timestamps."""
        if len(self.t_s) < 2:
            raise ValidationError("timestamp", f"series {self.series_id!r} needs at least 2 points")
        diffs = np.diff(self.t_s)
        vals, counts = np.unique(diffs[diffs > 0], return_counts=True)
        return int(vals[np.argmax(counts)])


def parse_ts(raw: str, where: str) -> int:
    text = raw.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
        if dt.tzinfo is None:  # the format says UTC; a naive stamp is read as UTC
            dt = dt.replace(tzinfo=UTC)
        return int(dt.timestamp())
    except (ValueError, OverflowError):
        raise ValidationError("timestamp", f"not an ISO-8601 time: {raw!r}", where) from None


def read_series_csv(
    path: str | Path, *, nonnegative: bool = False, check_id: Callable[[str], object] | None = None
) -> dict[str, Series]:
    """Read a generic series CSV into one :class:`Series` per ``series_id`` (sorted by time).

    Duplicate timestamps within a series keep the last value. Raises ValidationError naming file and line;
    with ``nonnegative`` (demand, which a forecast refuses below 0) also for a negative value, and for a
    series id that ``check_id`` refuses (it raises ValidationError; called on the id's first line).
    """
    p = Path(path)
    text = read_input_text(p)
    rows: dict[str, tuple[list[int], list[float]]] = {}
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise ValidationError("header", "file is empty", str(p))
    cols = [h.strip().lower() for h in header]
    for need in ("timestamp", "series_id", "value"):
        if need not in cols:
            raise ValidationError(need, f"missing column (header is {header})", f"{p}:1")
    it, isid, iv = cols.index("timestamp"), cols.index("series_id"), cols.index("value")
    for lineno, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{p}:{lineno}"
        if len(row) < len(cols):
            raise ValidationError("row", f"expected {len(cols)} fields, got {len(row)}", where)
        t = parse_ts(row[it], where)
        raw_v = row[iv].strip()
        try:
            v = float(raw_v) if raw_v else float("nan")
        except ValueError:
            raise ValidationError("value", f"not a number: {raw_v!r}", where) from None
        if math.isinf(v):
            raise ValidationError("value", f"not a finite number: {raw_v!r} (leave it empty for a gap)", where)
        sid = row[isid].strip()
        if check_id is not None and sid not in rows:
            try:
                check_id(sid)
            except ValidationError as exc:
                raise ValidationError(exc.field, exc.message, where) from None
        if nonnegative and v < 0:
            raise ValidationError("value", f"series {sid!r}: demand must be >= 0, got {raw_v!r}", where)
        ts, vs = rows.setdefault(sid, ([], []))
        ts.append(t)
        vs.append(v)
    if not rows:
        raise ValidationError("rows", "no data rows", str(p))
    out: dict[str, Series] = {}
    for sid, (ts, vs) in rows.items():
        t_arr = np.asarray(ts, dtype=np.int64)
        v_arr = np.asarray(vs, dtype=np.float64)
        order = np.argsort(t_arr, kind="stable")
        t_arr, v_arr = t_arr[order], v_arr[order]
        # keep the last value of duplicated stamps
        keep = np.ones(len(t_arr), dtype=bool)
        keep[:-1] = t_arr[1:] != t_arr[:-1]
        out[sid] = Series(sid, t_arr[keep], v_arr[keep])
    return out


def resample_mean(series: Series, step_s: int) -> Series:
    """Aggregate a series onto a coarser regular grid by the mean of each bucket (NaN buckets stay NaN)."""
    if step_s <= 0:
        raise ValidationError("step_s", f"must be > 0, got {step_s}")
    start = series.t_s[0] - series.t_s[0] % step_s
    idx = (series.t_s - start) // step_s
    n = int(idx[-1]) + 1
    check_grid(f"series {series.series_id!r}", n, step_s)
    sums = np.zeros(n)
    counts = np.zeros(n)
    ok = ~np.isnan(series.values)
    np.add.at(sums, idx[ok], series.values[ok])
    np.add.at(counts, idx[ok], 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        vals = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return Series(series.series_id, start + np.arange(n, dtype=np.int64) * step_s, vals)
