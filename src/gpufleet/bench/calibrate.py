"""``gpufleet bench calibrate``: the statistics of real traces that the built-in scenario is calibrated on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.adapters.traces import read_series_csv, resample_mean
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.demand import QUARTER_S, serving_rps


def serving_shape(path: Path) -> dict[str, dict[str, float]]:
    """Daily profile of each series (hourly means; 0-rps windows treated as gaps)."""
    out: dict[str, dict[str, float]] = {}
    for sid, ser in read_series_csv(path).items():
        v = resample_mean(ser, 3600).values.copy()
        v[v == 0] = np.nan
        n = len(v) // 24 * 24
        days = v[:n].reshape(-1, 24)
        prof = np.nanmean(days, axis=0)
        daily = np.nanmean(days, axis=1)
        out[sid] = {
            "days": float(len(days)),
            "peak_over_mean": float(prof.max() / prof.mean()),
            "trough_over_mean": float(prof.min() / prof.mean()),
            "daily_amplitude": float((prof.max() - prof.min()) / 2 / prof.mean()),
            "day_to_day_cv": float(np.nanstd(daily) / np.nanmean(daily)),
        }
    return out


def training_shape(path: Path, capacity_gpus: float = 856.0) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for sid, ser in read_series_csv(path).items():
        x = resample_mean(ser, 3600).values
        mean = float(np.nanmean(x))
        out[sid] = {
            "hours": float(len(x)),
            "mean_gpus": mean,
            "mean_over_capacity": mean / capacity_gpus,
            "cv_hourly": float(np.nanstd(x) / mean),
            "p95_over_mean": float(np.nanpercentile(x, 95) / mean),
        }
    return out


def simulated_serving_shape(days: int = 28, seed: int = 7) -> dict[str, dict[str, float]]:
    """The same statistics for the built-in scenario's serving traffic (growth removed), for comparison."""
    sc = default_scenario(days=days, seed=seed)
    rng = np.random.default_rng(seed)
    t = np.arange(0, days * 86400, 3600)
    out: dict[str, dict[str, float]] = {}
    for spec in sc.serving:
        v = serving_rps(spec, t, rng) / spec.growth_per_quarter ** (t / QUARTER_S)
        days_ = v.reshape(-1, 24)
        prof = days_.mean(axis=0)
        daily = days_.mean(axis=1)
        out[f"sim:{spec.name}"] = {
            "days": float(days),
            "peak_over_mean": float(prof.max() / prof.mean()),
            "trough_over_mean": float(prof.min() / prof.mean()),
            "daily_amplitude": float((prof.max() - prof.min()) / 2 / prof.mean()),
            "day_to_day_cv": float(daily.std() / daily.mean()),
        }
    return out


def calibrate(data_dir: Path) -> dict[str, Any]:
    serving = serving_shape(data_dir / "serving" / "servegen_rate_10min.csv")
    serving.update(simulated_serving_shape())
    return {
        "serving": serving,
        "training": training_shape(data_dir / "training" / "helios_earth_gpu_demand_minutely.csv"),
    }
