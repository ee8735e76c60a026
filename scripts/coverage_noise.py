"""How often can a calibrated band pass issue 21's coverage test on 4 days? (docs/benchmarks/generalize.md,
"How noisy is the coverage test", session 30.)

For each series of ``bench generalize``'s forecast stage, the loop's forecaster (the default setting) forecasts
the ``--windows`` days *before* the four test days, one day at a time, as the stage does. Each hour's actual gets
a score: its distance from the median in units of the band's half-width on its side (``|y - q50| / (q90 - q50)``
above the median, ``/ (q50 - q10)`` below), so the band holds the hours with score <= 1. The band that is
calibrated on those days in hindsight is the one scaled by ``m``, the 82.5 % quantile of the pooled scores: it
holds 82.5 % of their hours, the middle of the 0.75-0.90 range. Its coverage on one day varies from day to day
(calm days near 100 %, shock days far below); the coverage test averages four days. Drawing four of the tracked
days with replacement (``--draws`` times) gives the chance that such a band, calibrated for the series as a whole
but not for each day, lands in 0.75-0.90 on four days. The sum over series is the number of passes to expect from
a forecaster whose band is right on average and no better: a noise floor of the test, not a property of gpufleet.
Also printed: the share of runs of four consecutive tracked days on which the hindsight band, and the shipped band
as it was issued (multiplier 1), would pass (serial correlation kept), and the shipped band's coverage over all the
tracked days.

    python scripts/coverage_noise.py ../shared/data [--windows 20] [--draws 20000] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.bench.forecast import model_factories
from gpufleet.bench.generalize_data import HOUR_S, forecast_series
from gpufleet.forecast.backtest import SCORED_QUANTILES
from gpufleet.forecast.base import ForecastModel
from gpufleet.forecast.gaps import mark_gaps

TARGET = 0.825
LOW, HIGH = 0.75, 0.90


def scores(y: np.ndarray, origins: list[int], h: int, make: Callable[[], ForecastModel]) -> np.ndarray:
    """``(days, h)``: each forecast hour's score (see module docstring); NaN where the actual is a gap (missing, or
    a data outage's zeros: the bench's rule, so the coverage is the one ``bench forecast`` reports)."""
    out = np.full((len(origins), h), np.nan)
    actual = np.where(mark_gaps(y, h), np.nan, y)  # gaps as the bench marks them (forecast.backtest)
    for i, o in enumerate(origins):
        hist = np.where(mark_gaps(y[:o], h), np.nan, y[:o])
        fc = make().fit(hist).predict(h, SCORED_QUANTILES)  # the levels the bench scores (they steer the model choice)
        lo, mid, hi = fc.at(0.1), fc.at(0.5), fc.at(0.9)
        a = actual[o : o + h]
        up = np.maximum(hi - mid, 1e-9)
        down = np.maximum(mid - lo, 1e-9)
        out[i] = np.where(a >= mid, (a - mid) / up, (mid - a) / down)
    return out


def pass_chance(day_cov: np.ndarray, draws: int, rng: np.random.Generator, days: int = 4) -> float:
    pick = rng.integers(0, len(day_cov), size=(draws, days))
    cov = day_cov[pick].mean(axis=1)
    return float(np.mean((cov >= LOW) & (cov <= HIGH)))


def block_pass_share(day_cov: np.ndarray, days: int = 4) -> float:
    """The share of the runs of ``days`` consecutive days whose mean coverage is in 0.75-0.90."""
    runs = np.convolve(day_cov, np.ones(days) / days, mode="valid")
    return float(np.mean((runs >= LOW) & (runs <= HIGH)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--windows", type=int, default=20, help="days before the test days (fewer if the series is short)")
    ap.add_argument("--draws", type=int, default=20_000)
    ap.add_argument("--only", default="", help="comma-separated series ids (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    series = forecast_series(args.data)
    want = [s for s in args.only.split(",") if s] or list(series)
    rng = np.random.default_rng(0)
    h = 24
    rows: dict[str, dict[str, Any]] = {}
    for sid in want:
        y = series[sid].values
        n = len(y)
        first_test = n - 4 * h
        origins = [first_test - k * h for k in range(args.windows, 0, -1) if first_test - k * h >= 2 * h]
        make = model_factories(HOUR_S, int(series[sid].t_s[0]), ("gpufleet",))["gpufleet"]
        if len(origins) < 4:
            print(f"{sid}: {len(origins)} days before the test days, too few; skipped")
            continue
        sc = scores(y, origins, h, make)
        pooled = sc[np.isfinite(sc)]
        m = float(np.quantile(pooled, TARGET))
        with np.errstate(invalid="ignore"):
            day_cov = np.array([np.mean(d[np.isfinite(d)] <= m) for d in sc if np.isfinite(d).any()])
        raw_cov = np.array([np.mean(d[np.isfinite(d)] <= 1.0) for d in sc if np.isfinite(d).any()])
        p = pass_chance(day_cov, args.draws, rng)
        rows[sid] = {
            "hindsight_band_4day_runs_passing": round(block_pass_share(day_cov), 3),
            "shipped_band_4day_runs_passing": round(block_pass_share(raw_cov), 3),
            "days": len(day_cov),
            "multiplier": round(m, 3),
            "day_coverage_quartiles": [round(float(x), 3) for x in np.quantile(day_cov, (0.25, 0.5, 0.75))],
            "days_below_0.6": int(np.sum(day_cov < 0.6)),
            "shipped_band_coverage": round(float(raw_cov.mean()), 3),
            "pass_chance": round(p, 3),
        }
        print(sid, rows[sid], flush=True)
    for key in ("hindsight_band_4day_runs_passing", "shipped_band_4day_runs_passing"):
        print(f"{key}: {sum(r[key] for r in rows.values()):.1f} of {len(rows)} series on average")
    shipped = [r["shipped_band_coverage"] for r in rows.values()]
    inside = sum(LOW <= c <= HIGH for c in shipped)
    print(f"shipped band over all the tracked days: coverage in 0.75-0.90 on {inside} of {len(rows)} series")
    total = sum(r["pass_chance"] for r in rows.values())
    every = float(np.prod([r["pass_chance"] for r in rows.values()]))
    print(f"expected passes of the coverage test: {total:.1f} of {len(rows)}; chance that all pass: {every:.2g}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "expected_passes": total, "all_pass": every}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
