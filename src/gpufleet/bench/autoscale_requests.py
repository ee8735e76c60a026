"""Per-request traces with a measured service time, for the replica-autoscaling benchmark.

A CSV with one row per request, a time column (when the request arrived) and a work column (seconds the
request occupied one replica when it was served, e.g. ``exec_time_seconds`` of the Alibaba GenAI Stable
Diffusion trace). The work of a request is that column, taken as replica-seconds as they are: the token
model is not used, and the replica is whatever served the measured request (one GPU for the SD trace; the
benchmark's ``gpus_per_replica`` only scales the GPU-hours). Rows can be filtered (``where``: column = value,
all must hold) and split into one trace per value of a column (``group_column``: the named ``groups``, or
the ``top_groups`` busiest). Times without a zone are read as UTC; only their differences matter.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpufleet.adapters.inputs import read_input_text
from gpufleet.bench.autoscale_traces import ArrivalTrace, request_trace
from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class RequestColumns:
    """How to read a per-request file: which columns, which rows, which traces."""

    time_column: str
    work_column: str
    where: tuple[tuple[str, str], ...] = ()
    group_column: str | None = None
    groups: tuple[str, ...] = ()
    top_groups: int = 0

    def __post_init__(self) -> None:
        if not self.time_column.strip() or not self.work_column.strip():
            raise ValidationError("time_column", "the time and work columns must both be named")
        if (self.groups or self.top_groups) and self.group_column is None:
            raise ValidationError("group_column", "groups or top_groups need a group column")
        if self.groups and self.top_groups:
            raise ValidationError("groups", "give either named groups or top_groups, not both")
        if self.top_groups < 0:
            raise ValidationError("top_groups", f"must be >= 0, got {self.top_groups}")
        if self.group_column is not None and not (self.groups or self.top_groups):
            raise ValidationError("group_column", "name the groups to replay or how many of the busiest")


def parse_where(items: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``["col=value", ...]`` -> ``(("col", "value"), ...)`` (the value may contain ``=``)."""
    out = []
    for item in items:
        col, sep, val = item.partition("=")
        if not sep or not col.strip():
            raise ValidationError("where", f"expected COLUMN=VALUE, got {item!r}")
        out.append((col.strip(), val.strip()))
    return tuple(out)


def _column(df: pd.DataFrame, name: str, option: str, where: str) -> str:
    """The file's column called ``name`` (exact, else the only case-insensitive match)."""
    if name in df.columns:
        return name
    hits = [c for c in df.columns if c.strip().lower() == name.strip().lower()]
    if len(hits) == 1:
        return str(hits[0])
    raise ValidationError(option, f"no column {name!r}; the file's columns are {list(df.columns)}", where)


def _line(df: pd.DataFrame, pos: int) -> int:
    """File line of the ``pos``-th remaining row (row 0 is line 2, under the header)."""
    return int(df.index[pos]) + 2


def load_request_csv(path: str | Path, cols: RequestColumns, step_s: float = 0.1) -> list[ArrivalTrace]:
    """One trace per selected group (or one for the whole filtered file), binned on a ``step_s`` grid."""
    p = Path(path)
    text = read_input_text(p, "trace")  # missing, a directory, unreadable, not UTF-8: one clear error
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise ValidationError("header", "file is empty", str(p)) from None
    except pd.errors.ParserError as exc:
        raise ValidationError("trace", f"not a readable CSV: {str(exc).strip()}", str(p)) from None
    # blank lines are skipped but keep their place, so that a row's index still gives its file line
    df = df[(df != "").any(axis=1)]
    tcol = _column(df, cols.time_column, "time_column", str(p))
    wcol = _column(df, cols.work_column, "work_column", str(p))
    label = p.name
    for c, v in cols.where:
        wc = _column(df, c, "where", str(p))
        keep = df[wc].str.strip() == v
        if not keep.any():
            seen = sorted(df[wc].str.strip().unique().tolist())[:10]
            raise ValidationError("where", f"no row has {wc}={v!r}; some of its values: {seen}", str(p))
        df = df[keep]
        label += f"[{wc}={v}]"
    if len(df) == 0:
        raise ValidationError("trace", "no request rows", str(p))
    t_ns = _times(df, tcol, str(p))
    work = _work(df, wcol, str(p))
    if cols.group_column is None:
        return [_trace(label, t_ns, work, step_s, str(p))]
    gcol = _column(df, cols.group_column, "group_column", str(p))
    keys = df[gcol].str.strip().to_numpy()
    counts = pd.Series(keys).value_counts()
    if cols.groups:
        missing = [g for g in cols.groups if g not in counts.index]
        if missing:
            raise ValidationError("group", f"no row has {gcol}={missing[0]!r}", str(p))
        chosen = list(cols.groups)
    else:
        # busiest first; ties by name so that the choice never depends on the file's row order
        ranked = sorted(counts.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))
        chosen = [str(k) for k, _ in ranked[: cols.top_groups] if str(k) != ""]
    return [_trace(f"{label}:{gcol}={g}", t_ns[keys == g], work[keys == g], step_s, str(p)) for g in chosen]


def _times(df: pd.DataFrame, col: str, where: str) -> np.ndarray:
    raw = df[col].str.strip()
    t = pd.to_datetime(raw, utc=True, format="mixed", errors="coerce")
    bad = np.flatnonzero(t.isna().to_numpy())
    if len(bad):
        i = int(bad[0])
        raise ValidationError(col, f"unparseable time {raw.iloc[i]!r}", f"{where}:{_line(df, i)}")
    return np.asarray(t.to_numpy(dtype="datetime64[ns]").astype(np.int64))


def _work(df: pd.DataFrame, col: str, where: str) -> np.ndarray:
    raw = df[col].str.strip()
    w = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if len(bad):
        i = int(bad[0])
        raise ValidationError(
            col, f"service time must be a number of seconds >= 0, got {raw.iloc[i]!r}", f"{where}:{_line(df, i)}"
        )
    return w


def _trace(trace_id: str, t_ns: np.ndarray, work: np.ndarray, step_s: float, where: str) -> ArrivalTrace:
    order = np.argsort(t_ns, kind="stable")
    t = t_ns[order]
    rel_s = (t - t[0]).astype(np.float64) / 1e9
    w = np.asarray(work[order], dtype=np.float64)
    if not (w > 0).any():
        raise ValidationError("work_column", f"{trace_id}: every service time is 0: no work to serve", where)
    return request_trace(trace_id, rel_s, w, step_s)
