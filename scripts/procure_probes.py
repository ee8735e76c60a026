"""Derived demand series for the procurer, our own and seeded: probes, not stage rows.

Each file is 8 weeks hourly. Drops and dips (the procurer's step-down hold, docs/procure.md step 6): 100 GPUs +-20 %
over the day (noise sd 2 GPUs), and from hour 336 (the third week):

  step_down       10 GPUs to the end (docs/procure.md, "A step down")
  step_down_40    40 GPUs to the end (below the break-even share 0.634 of the old days' lowest hours)
  step_down_60    60 GPUs to the end (at the daily crests below it, elsewhere above)
  step_down_late  10 GPUs from hour 672 (the fifth week) instead
  dip_6h          10 GPUs for 6 hours, then 100 again (what the hold costs when the drop was a dip)
  dip_day         10 GPUs for a day, then 100 again

Other shapes (session 36, the same diurnal cycle and noise): ``step_up`` (10 GPUs, then 100 from hour 336),
``ramp_up`` (20 to 100 GPUs), ``ramp_down`` (100 to 20), ``weekend`` (30 GPUs on two days of each week, 100 on the
others), ``steps_updown`` (100 and 30 GPUs, two weeks each) and ``lumpy`` (training-like: jobs of 8-64 GPUs arrive
with probability 0.08 an hour and run an exponential 30 hours on average; no diurnal cycle).

Replay one as

    python scripts/procure_probes.py OUT_DIR [--run]
    gpufleet bench procure --demand OUT_DIR/step_down.csv --term-hours 168 --lead-hours 24

``--run`` replays every file at 1-week term / 1-day lead and 1-month term / 1-week lead and prints gpufleet's ratio
to hindsight with and without the step-down hold (``ForecastLedProcurer.step_down_h``) beside the simple rules'.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

WEEKS = 8
DROP_H = 24 * 14
# name: (drop start hour, drop end hour or None for the rest of the file, level during the drop)
PROBES: dict[str, tuple[int, int | None, float]] = {
    "step_down": (DROP_H, None, 10.0),
    "step_down_40": (DROP_H, None, 40.0),
    "step_down_60": (DROP_H, None, 60.0),
    "step_down_late": (DROP_H * 2, None, 10.0),
    "dip_6h": (DROP_H, DROP_H + 6, 10.0),
    "dip_day": (DROP_H, DROP_H + 24, 10.0),
}


def series(start: int, end: int | None, low: float, seed: int = 5, weeks: int = WEEKS) -> np.ndarray:
    """GPUs per hour: 100 +-20 % over the day, ``low`` instead of 100 on ``[start, end)``."""
    rng = np.random.default_rng(seed)
    h = np.arange(24 * 7 * weeks)
    level = np.where((h >= start) & (h < (end if end is not None else len(h))), low, 100.0)
    out: np.ndarray = np.maximum(
        0, level * (1 + 0.2 * np.sin(2 * np.pi * ((h % 24) / 24 - 0.25))) + rng.normal(0, 2, len(h))
    )
    return out


def other_shapes(seed: int = 7, weeks: int = WEEKS) -> dict[str, np.ndarray]:
    """The other shapes of the module docstring, GPUs per hour."""
    rng = np.random.default_rng(seed)
    n = 24 * 7 * weeks
    h = np.arange(n)
    diurnal = 1 + 0.2 * np.sin(2 * np.pi * ((h % 24) / 24 - 0.25))

    def noisy(level: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.maximum(0, level * diurnal + rng.normal(0, 2, n))
        return out

    shapes = {
        "step_up": noisy(np.where(h < DROP_H, 10.0, 100.0)),
        "ramp_up": noisy(20 + 80 * h / n),
        "ramp_down": noisy(100 - 80 * h / n),
        "weekend": noisy(np.where(((h // 24) % 7) >= 5, 30.0, 100.0)),
        "steps_updown": noisy(np.where((h // DROP_H) % 2 == 0, 100.0, 30.0)),
    }
    lumpy = np.zeros(n)
    for t in np.flatnonzero(rng.random(n) < 0.08):
        lumpy[t : t + int(rng.exponential(30)) + 1] += rng.choice([8, 16, 32, 64])
    shapes["lumpy"] = lumpy
    return shapes


def write(out: Path, name: str, v: np.ndarray) -> None:
    """One series as ``timestamp,series_id,value`` (GPUs per hour)."""
    t = pd.date_range("2024-03-01", periods=len(v), freq="1h")
    sid = "decl" if name == "step_down" else name  # the id session 35's figures were quoted with
    pd.DataFrame({"timestamp": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "series_id": sid, "value": v.round(2)}).to_csv(
        out, index=False
    )


def run(paths: dict[str, Path]) -> None:
    """Replay each file as ``bench procure`` does (both term/lead pairs) with and without the hold."""
    from gpufleet.bench.procure import ProcurerPolicy, gpufleet_procurer, load_demand
    from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
    from gpufleet.procure.hindsight import hindsight_optimal
    from gpufleet.procure.policies import baseline_policies
    from gpufleet.procure.replay import ReplayConfig, replay

    print(
        f"{'term/lead':9s} {'probe':16s} {'gpufleet':>9s} {'no hold':>9s}  "
        + "  ".join(f"{p.name:>16s}" for p in baseline_policies())
    )
    for (term_h, lead_h), (name, path) in itertools.product(((168, 24), (720, 168)), paths.items()):
        cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=term_h, lead_h=lead_h)
        d = next(iter(load_demand(path).values()))
        opt = hindsight_optimal(cfg, d).result.cost_usd
        base = gpufleet_procurer()
        on = replay(cfg, d, ProcurerPolicy(dataclasses.replace(base, books_={}), "gpufleet")).cost_usd / opt
        off_p = dataclasses.replace(base, books_={}, step_down_h=None)  # type: ignore[type-var]
        off = replay(cfg, d, ProcurerPolicy(off_p, "gpufleet")).cost_usd / opt
        simple = [replay(cfg, d, p).cost_usd / opt for p in baseline_policies()]
        print(f"{term_h}/{lead_h:<5d} {name:16s} {on:9.4f} {off:9.4f}  " + "  ".join(f"{r:16.4f}" for r in simple))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, help="where the CSVs are written")
    ap.add_argument("--run", action="store_true", help="replay each file and print the ratios to hindsight")
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (start, end, low) in PROBES.items():
        paths[name] = a.out_dir / f"{name}.csv"
        write(paths[name], name, series(start, end, low))
    for name, v in other_shapes().items():
        paths[name] = a.out_dir / f"{name}.csv"
        write(paths[name], name, v)
    print(f"wrote {len(paths)} files to {a.out_dir}")
    if a.run:
        run(paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
