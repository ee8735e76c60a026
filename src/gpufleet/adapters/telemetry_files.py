"""GPU utilization from uploaded files: CSV rows, JSON rows, or a saved Prometheus ``query_range`` response.

CSV header: ``timestamp,metric,namespace,pod,device,value`` (timestamp ISO-8601 UTC or UNIX seconds; value on
the metric's native scale, e.g. percent for ``DCGM_FI_DEV_GPU_UTIL``). JSON: a list of objects with the same
keys, or the body Prometheus returns for ``/api/v1/query_range``. Every error names the file, line and field.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.adapters.inputs import MAX_UNIX_S, read_input_text
from gpufleet.adapters.telemetry_prometheus import add_matrix
from gpufleet.cost.telemetry import BatchBuilder, SeriesKey, TelemetryBatch
from gpufleet.domain.errors import ValidationError

COLUMNS = ("timestamp", "metric", "namespace", "pod", "device", "value")


def parse_time(raw: object, where: str) -> int:
    """UNIX seconds (``0 .. 9999-12-31``) or ISO-8601 with an offset or ``Z`` -> UNIX seconds."""
    text = str(raw).strip()
    try:
        secs = float(text)
    except ValueError:
        pass
    else:
        if not 0 <= secs <= MAX_UNIX_S:  # also false for NaN
            raise ValidationError("timestamp", f"UNIX seconds must be in 0..{MAX_UNIX_S}: {raw!r}", where)
        return int(secs)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError("timestamp", f"not a UNIX time or ISO-8601 time: {raw!r}", where) from None
    if dt.tzinfo is None:
        raise ValidationError("timestamp", f"needs a UTC offset or 'Z': {raw!r}", where)
    return int(dt.timestamp())


def _clip(value: object, most: int = 60) -> str:
    """``repr(value)`` cut to ``most`` characters (a 400-digit number in an error is noise)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _rows_to_batch(rows: list[tuple[str, dict[str, Any]]]) -> TelemetryBatch:
    grouped: dict[SeriesKey, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for where, row in rows:
        for c in COLUMNS:
            if row.get(c) in (None, "") and c != "namespace":
                raise ValidationError(c, "missing", where)
        try:
            value = float(row["value"])
        except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer beyond a float
            raise ValidationError("value", f"not a number: {_clip(row['value'])}", where) from None
        key = SeriesKey(str(row["metric"]), str(row.get("namespace") or ""), str(row["pod"]), str(row["device"]))
        ts, vs = grouped[key]
        ts.append(parse_time(row["timestamp"], where))
        vs.append(value)
    b = BatchBuilder()
    for key, (ts, vs) in grouped.items():
        b.add(key, np.asarray(ts, dtype=np.int64), np.asarray(vs, dtype=np.float64))
    return b.build()


def read_csv_text(text: str, name: str = "<upload>") -> TelemetryBatch:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        raise ValidationError("header", "file is empty", name)
    missing = [c for c in COLUMNS if c not in [f.strip() for f in reader.fieldnames]]
    if missing:
        raise ValidationError(missing[0], f"missing column (header is {reader.fieldnames})", f"{name}:1")
    rows = [(f"{name}:{i}", {k.strip(): v for k, v in r.items() if k}) for i, r in enumerate(reader, start=2)]
    return _rows_to_batch(rows)


def read_json_text(text: str, name: str = "<upload>") -> TelemetryBatch:
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError("json", exc.msg, f"{name}:{exc.lineno}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ValidationError("json", str(exc), name) from None
    except RecursionError:
        raise ValidationError("json", "nested too deeply", name) from None
    if isinstance(body, dict) and "data" in body:  # a saved Prometheus query_range response
        data = body["data"]
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise ValidationError("data.resultType", "expected a Prometheus matrix", name)
        b = BatchBuilder()
        add_matrix(b, "", data.get("result", []), name)
        return b.build()
    if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
        raise ValidationError("json", "expected a list of sample objects or a Prometheus query_range body", name)
    return _rows_to_batch([(f"{name}[{i}]", r) for i, r in enumerate(body)])


def read_file(path: str | Path) -> TelemetryBatch:
    """Read a ``.csv`` or ``.json`` upload from disk."""
    p = Path(path)
    if p.suffix.lower() not in (".csv", ".json"):
        raise ValidationError("path", "expected a .csv or .json file", str(p))
    text = read_input_text(p)
    if p.suffix.lower() == ".json":
        return read_json_text(text, str(p))
    if p.suffix.lower() == ".csv":
        return read_csv_text(text, str(p))
    raise ValidationError("path", "expected a .csv or .json file", str(p))
