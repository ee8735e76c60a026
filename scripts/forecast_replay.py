"""Replay forecast calibration settings on the ``bench generalize`` forecast series, fits cached (issue 21).

Every candidate of the loop's forecaster is fitted at up to ``--windows`` daily origins before each of the 4 test
origins, once, and kept in a ``ForecastMemo`` pickled to ``--cache``; a setting is then the real
:class:`~gpufleet.forecast.conformal.CalibratedForecaster` with other options, run through the real ``backtest``
(the fits are memo hits), scored against the baselines of the same series (cached too). Prints, per setting, the
series that pass (coverage 0.75-0.90 and pinball <= the best baseline), the mean pinball ratio, and the
leave-one-trace-out result over the settings given.

    PYTHONPATH=src python scripts/forecast_replay.py ../shared/data --cache /tmp/fc_cache.pkl \
        --settings 'default' 'margin=0.1' 'aci_windows=16,aci_step=0.24'
"""

from __future__ import annotations

import argparse
import math
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.bench import generalize_data as gd
from gpufleet.bench.forecast import run_forecast_bench
from gpufleet.bench.generalize import FORECAST_BASELINES, loto_choice
from gpufleet.forecast.aci import AciSettings
from gpufleet.forecast.backtest import SCORED_QUANTILES, backtest
from gpufleet.forecast.conformal import CalibratedForecaster, ForecastMemo, default_candidates
from gpufleet.forecast.gaps import mark_gaps
from gpufleet.forecast.loop import seasons_for_step

H = 24
STEP_S = 3600
MAX_HISTORY = 672


def parse_setting(text: str) -> dict[str, Any]:
    """``"margin=0.1,aci_windows=16"`` -> keyword options of :class:`CalibratedForecaster` (``default`` = none)."""
    out: dict[str, Any] = {}
    aci: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        if part == "default":
            continue
        k, v = part.split("=")
        val: Any = float(v) if "." in v else int(v) if v.isdigit() else v
        if k.startswith("aci_"):
            aci[k.removeprefix("aci_")] = val
        elif k == "margin":
            out["switch_margin"] = val
        else:
            out[k] = val
    if aci:
        out["aci"] = AciSettings(**aci)
    return out


def make_cf(memo: ForecastMemo, **opts: Any) -> CalibratedForecaster:
    ss = seasons_for_step(STEP_S)
    return CalibratedForecaster(
        default_candidates(ss), season=min(ss), max_history=MAX_HISTORY, memo=memo, tag=f"default{ss}", **opts
    )


class Model:
    def __init__(self, memo: ForecastMemo, opts: dict[str, Any]) -> None:
        self.memo, self.opts = memo, opts

    def fit(self, y: np.ndarray) -> Model:
        self.y_ = y
        return self

    def predict(self, h: int, qs: Any) -> Any:
        return make_cf(self.memo, **self.opts).fit(self.y_).predict(h, qs)


def warm(series: dict[str, Any], memo: ForecastMemo, windows: int) -> None:
    cf = make_cf(memo)
    for sid, s in series.items():
        t0 = time.process_time()
        y = np.asarray(s.values, dtype=np.float64)
        n = len(y)
        for k in range(4, 0, -1):
            t = n - k * H
            hist = np.where(mark_gaps(y[:t], 24), np.nan, y[:t])
            cf.fit(hist)
            origins = [t - j * H for j in range(0, windows + 1) if t - j * H >= 48]
            for name in cf.candidates:
                for o in origins:
                    try:
                        cf._forecast(name, hist[:o], H, SCORED_QUANTILES)
                    except Exception:  # a candidate that refuses is not tracked
                        break
        print(f"warm {sid}: {time.process_time() - t0:.1f} s CPU, memo {len(memo)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--cache", default="/tmp/fc_replay.pkl")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--settings", nargs="+", default=["default"])
    ap.add_argument("--series", nargs="*", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    series = gd.forecast_series(Path(args.data), 3)
    if args.series:
        series = {k: v for k, v in series.items() if k in args.series}
    cache = Path(args.cache)
    memo = ForecastMemo(10**7)
    base: dict[str, dict[str, tuple[float, float]]] = {}
    if cache.exists():
        memo._store, base = pickle.loads(cache.read_bytes())
    if any(sid not in base for sid in series):
        warm(series, memo, args.windows)
        for sid, s in series.items():
            if sid not in base:
                r = run_forecast_bench({sid: s}, "1d", models=FORECAST_BASELINES)
                base[sid] = {m: (sc.pinball, sc.coverage_80) for m, sc in r.scores[sid].items()}
        cache.write_bytes(pickle.dumps((memo._store, base)))
    per: dict[str, dict[str, tuple[int, float]]] = {sid: {} for sid in series}
    cells: dict[str, dict[str, str]] = {sid: {} for sid in series}
    for text in args.settings:
        opts = parse_setting(text)
        passed, ratios = 0, []
        for sid, s in series.items():
            sc = backtest(s.values, lambda o=opts: Model(memo, o), H, 24, time.perf_counter, 4)
            best = min(p for p, _ in base[sid].values())
            ratio = sc.pinball / best
            ok = 0.75 <= sc.coverage_80 <= 0.90 and ratio <= 1.0
            passed += ok
            ratios.append(ratio)
            per[sid][text] = (0 if ok else 1, ratio)
            cells[sid][text] = f"{ratio:.3f},{sc.coverage_80:.3f}{'' if ok else '*'}"
        print(f"{text}: {passed}/{len(series)} pass, mean ratio {np.mean(ratios):.4f}", flush=True)
    if len(args.settings) > 1:
        choice = loto_choice(per, args.settings)
        ok = sum(1 - per[sid][choice[sid][0]][0] for sid in series)
        mean = np.mean([per[sid][choice[sid][0]][1] for sid in series])
        print(f"LOO over these settings: {ok}/{len(series)} pass, mean ratio {mean:.4f}")
        for sid in series:
            if per[sid][choice[sid][0]][0] or args.verbose:
                print(f"  {sid}: chose {choice[sid][0]} -> {cells[sid][choice[sid][0]]}")
    if args.verbose or len(args.settings) <= 4:
        for sid in series:
            print(f"{sid:28s} " + "  ".join(f"{cells[sid][t]:>14s}" for t in args.settings))
    if not math.isfinite(0.0):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
