"""The traces of ``gpufleet bench generalize``: every public trace under a data directory, per stage.

Layout (the one of ``../shared/data``, see its README); a file that is absent is skipped and listed with its
reason, so the command also runs on a directory holding only some of them (the tests' tiny generated trace):

* forecast (hourly means, or means over ``step_s``; horizon 1 day): every series of ServeGen's file (``m-large``
  and ``m-mid``, rps; any other ``serving/servegen_REST.csv`` as ``servegen-REST:SERIES``); every numeric column of
  Helios Earth (``helios:COLUMN``; any other cluster's ``training/helios_CLUSTER_minutely.csv`` as
  ``helios-CLUSTER:COLUMN``) and every ``training/helios_*_gpu_demand_minutely.csv`` series; Alibaba GenAI SD
  request rate (``sd:all`` and per checkpoint model, the ``top_groups`` busiest); OpenB GPUs held by pods per hour
  (``openb:VARIANT``, every pod list);
* procure (hourly GPUs): ServeGen at 2 rps per 8-GPU replica, Helios demand and its GPU columns, SD GPU-busy
  hours x100 (whole and per model), every OpenB pod-list variant;
* autoscale: every ``serving/AzureLLMInferenceTrace_*.csv`` (the code trace also thinned), every ServeGen file's
  series, SD (whole and per model; measured ``exec_time_seconds``, one GPU per replica, one request
  per replica);
* binpack: every OpenB pod list against the GPU node list, derived pinned lists (``bench/binpack_pins.py``) and
  mixes (``bench/binpack_mix.py``), and every OpenB pod list against each node inventory of ``inventory/``
  (``bench/binpack_inventory.py``);
* prices: the reserved / on-demand ratios of the AWS price file (:func:`reserved_ratios`), for the procurement
  stage's ``--reserved-ratio min|median|max``.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.traces import Series, resample_mean
from gpufleet.bench.forecast import load_regular, request_rate_series
from gpufleet.bench.procure import RpsToGpus, hourly_demand, load_demand, pods_hourly_demand
from gpufleet.domain.errors import ValidationError

HOUR_S = 3600
SERVEGEN = "serving/servegen_rate_10min.csv"
SERVEGEN_GLOB = "serving/servegen_*.csv"  # every file of ServeGen's format (timestamp, series_id, value)
AZURE = "serving/AzureLLMInferenceTrace_code.csv"  # the one also thinned for the autoscaling stage
AZURE_GLOB = "serving/AzureLLMInferenceTrace_*.csv"  # every Azure LLM trace (code, conversation, ...)
SD = "serving/alibaba_genai_sd_request_trace.csv"
HELIOS_GLOB = "training/helios_*_minutely.csv"  # one per cluster (earth, ...); the demand files are apart
HELIOS_DEMAND_SUFFIX = "_gpu_demand_minutely.csv"
OPENB_NODES = "openb/openb_node_list_gpu_node.csv"
AWS_PRICES = "prices/aws_gpu_instance_prices.csv"
#: Helios columns that are not demand: capacity (constant per day) and a ratio derived from the others.
HELIOS_SKIP = ("total_gpu_num",)
#: Alibaba SD checkpoint models scored on their own: the busiest five, every model with at least 2,000 of the
#: trace's 26,823 requests (about one per 10 minutes over its 23 days; the sixth has 1,147). Three until session 28.
SD_MODELS = 5
#: Helios columns in GPUs (the ones procurement applies to).
HELIOS_GPU_COLUMNS = ("running_gpu_num", "pending_gpu_num")


def openb_pod_lists(root: Path) -> list[Path]:
    return sorted((root / "openb").glob("openb_pod_list_*.csv"))


def servegen_files(root: Path) -> list[tuple[str, Path]]:
    """``(prefix, path)`` of every ServeGen-format file: ``servegen`` for ``servegen_rate_10min.csv`` (the row
    names of the first runs), ``servegen-REST`` for any other ``servegen_REST.csv``."""
    return [
        ("servegen" if p.name == Path(SERVEGEN).name else f"servegen-{p.stem.removeprefix('servegen_')}", p)
        for p in sorted(root.glob(SERVEGEN_GLOB))
    ]


def azure_traces(root: Path) -> list[Path]:
    """Every Azure LLM inference trace under ``serving/`` (the code trace, and any other of the same format)."""
    return sorted(root.glob(AZURE_GLOB))


def helios_demand_files(root: Path) -> list[Path]:
    return sorted(root.glob("training/helios_*" + HELIOS_DEMAND_SUFFIX))


def helios_column_files(root: Path) -> list[tuple[str, Path]]:
    """``(prefix, path)`` of every Helios cluster's minutely file: ``helios`` for Earth (the row names of the
    first runs), ``helios-CLUSTER`` for any other cluster's file of the same format."""
    out = []
    for p in sorted(root.glob(HELIOS_GLOB)):
        if p.name.endswith(HELIOS_DEMAND_SUFFIX):
            continue
        cluster = p.name.removeprefix("helios_").removesuffix("_minutely.csv")
        out.append(("helios" if cluster == "earth" else f"helios-{cluster}", p))
    return out


def _read_csv(p: Path, what: str, usecols: list[str] | None = None) -> pd.DataFrame:
    """``pd.read_csv`` with a file that pandas cannot parse (or lacks a ``usecols`` column) refused by name."""
    try:
        return pd.read_csv(p, usecols=usecols)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        raise ValidationError(what, f"cannot read the CSV: {str(e).splitlines()[0]}", str(p)) from None


def _times(df: pd.DataFrame, col: str, p: Path) -> pd.Series:
    try:
        return pd.to_datetime(df[col], utc=True)
    except (ValueError, TypeError) as e:
        raise ValidationError(col, f"not a timestamp: {str(e).splitlines()[0]}", str(p)) from None


def _helios_frame(p: Path, step_s: int = HOUR_S) -> pd.DataFrame:
    df = _read_csv(p, "helios")
    if "time" not in df.columns:
        raise ValidationError("time", "Helios file has no time column", str(p))
    df["time"] = _times(df, "time", p)
    bad = [c for c in df.columns if c != "time" and not pd.api.types.is_numeric_dtype(df[c])]
    if bad:
        raise ValidationError(bad[0], "not a numeric column", str(p))
    return df.set_index("time").resample(pd.Timedelta(seconds=step_s)).mean()


def _frame_series(sid: str, col: pd.Series) -> Series:
    t = (col.index.astype("int64") // 10**9).to_numpy(dtype=np.int64)
    return Series(sid, t, col.to_numpy(dtype=np.float64))


def _sd_frame(root: Path) -> pd.DataFrame | None:
    p = root / SD
    if not p.exists():
        return None
    df = _read_csv(p, "sd", usecols=["gmt_create", "exec_time_seconds", "checkpoint_model_version_id"])
    df["gmt_create"] = _times(df, "gmt_create", p)
    return df


def _sd_top_models(df: pd.DataFrame, top_groups: int) -> list[str]:
    counts = df["checkpoint_model_version_id"].value_counts()
    return [str(m) for m in counts.index[:top_groups]]


def forecast_series(root: Path, top_groups: int = SD_MODELS, step_s: int = HOUR_S) -> dict[str, Series]:
    """Series of every forecastable trace (see module docstring), as means over ``step_s`` (hourly by default; a
    file whose own step is coarser keeps its own)."""
    out: dict[str, Series] = {}
    for prefix, path in servegen_files(root):
        for sid, s in load_regular(path).items():
            out[f"{prefix}:{sid}"] = resample_mean(s, max(step_s, s.step_s))
    for path in helios_demand_files(root):
        for sid, s in load_regular(path).items():
            out[f"helios:{sid}"] = resample_mean(s, max(step_s, s.step_s))
    for prefix, path in helios_column_files(root):
        hel = _helios_frame(path, step_s)
        for col in hel.columns:
            if col not in HELIOS_SKIP:
                out[f"{prefix}:{col}"] = _frame_series(f"{prefix}:{col}", hel[col])
    if (root / SD).exists():
        df = _sd_frame(root)
        assert df is not None
        rates = request_rate_series(root / SD, "gmt_create", step_s, "checkpoint_model_version_id", top_groups)
        for key, s in rates.items():
            out[f"sd:{key.split('=')[-1]}"] = s
    for p in openb_pod_lists(root):
        g = pods_hourly_demand(p, step_s)
        out[f"openb:{p.stem.removeprefix('openb_pod_list_')}"] = Series(
            p.stem, step_s * np.arange(len(g), dtype=np.int64), g
        )
    return out


def procure_series(root: Path, top_groups: int = SD_MODELS, sd_scale: float = 100.0) -> dict[str, np.ndarray]:
    """Hourly GPU demand of every procurement trace (see module docstring)."""
    out: dict[str, np.ndarray] = {}
    for prefix, path in servegen_files(root):
        for sid, d in load_demand(path, convert=RpsToGpus(2.0, 8)).items():
            out[f"{prefix}:{sid}"] = d
    for path in helios_demand_files(root):
        for sid, d in load_demand(path).items():
            out[f"helios:{sid}"] = d
    for prefix, path in helios_column_files(root):
        hel = _helios_frame(path)
        for col in HELIOS_GPU_COLUMNS:
            if col in hel.columns:
                out[f"{prefix}:{col}"] = hourly_demand(_frame_series(col, hel[col]))
    df = _sd_frame(root)
    if df is not None:
        groups: list[tuple[str, pd.DataFrame]] = [("all", df)]
        groups += [(m, df[df["checkpoint_model_version_id"] == m]) for m in _sd_top_models(df, top_groups)]
        t0 = df["gmt_create"].min().floor("1h")
        n = int((df["gmt_create"].max() - t0) / pd.Timedelta(hours=1)) + 1
        for key, g in groups:
            hour = ((g["gmt_create"] - t0) / pd.Timedelta(hours=1)).astype(int).to_numpy()
            busy = np.bincount(hour, weights=g["exec_time_seconds"].fillna(0).to_numpy(), minlength=n) / HOUR_S
            out[f"sd:{key}x{sd_scale:g}"] = busy * sd_scale
    for p in openb_pod_lists(root):
        out[f"openb:{p.stem.removeprefix('openb_pod_list_')}"] = pods_hourly_demand(p)
    return out


def reserved_ratios(root: Path) -> list[float]:
    """Reserved (1 year, no upfront) / on-demand price of every row of the AWS price file that lists both
    (rows with an empty or non-numeric price are skipped; a file without the two columns is refused)."""
    path = root / AWS_PRICES
    if not path.exists():
        raise ValidationError("prices", f"no price file at {path}")
    need = ("on_demand_usd_hr", "reserved_1yr_noupfront_usd_hr")
    out: list[float] = []
    with io.StringIO(read_input_text(path, "prices"), newline="") as f:
        reader = csv.DictReader(f)
        if not set(need) <= set(reader.fieldnames or ()):
            raise ValidationError("header", f"need columns {list(need)}", str(path))
        for row in reader:
            try:
                od, rs = (float(row[k] or "nan") for k in need)
            except ValueError:
                continue
            if math.isfinite(od) and math.isfinite(rs) and od > 0 and rs > 0:
                out.append(rs / od)
    if not out:
        raise ValidationError("prices", f"no row lists both prices in {path}")
    return out


def reserved_ratio(root: Path, which: str) -> float:
    """``min``, ``median`` or ``max`` of :func:`reserved_ratios`."""
    if which not in ("min", "median", "max"):
        raise ValidationError("reserved_ratio", f"choose min, median or max; got {which!r}")
    ratios = reserved_ratios(root)
    return float(min(ratios) if which == "min" else max(ratios) if which == "max" else statistics.median(ratios))
