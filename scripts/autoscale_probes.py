"""Conversation-like request hours for the replica autoscaler: the probes of docs/benchmarks/generalize.md, "The
forecaster's warm-up at the target utilization" (session 32). Probes, not stage rows: our own seeded files.

Every public serving trace here is busy or bursty, and issue 21's held-out failure was a quiet conversation trace.
These files are Azure-format hours (``TIMESTAMP,ContextTokens,GeneratedTokens``) with Poisson arrivals whose rate
varies sinusoidally over 20 minutes, optionally with bursts (a multiple of the rate for some seconds, at Poisson
times), and output / prompt tokens drawn log-normal around the published medians of the Azure conversation trace
(129 and 1,020 tokens; log spreads 0.99 and 0.5, outputs capped at 4,096). Five families:

  conv_*   smooth, 4-8 rps, +-20-30 %          convr_*  smooth, 6-7.5 rps, +-10-35 %
  convb_*  3x bursts of 30 s, 6-12 an hour     convm_*  mild bursts, 1.6-2.2x for 10-20 s, 4-12 an hour
  shift_*  3-6 rps ramping to 11-15 rps over 2-15 minutes at minute 30-50 (+-10 %; session 34)

``--run`` also replays each file as ``gpufleet bench autoscale --trace F --no-oracle`` does (the whole hour scored) and prints
gpufleet's GPU-hours and attainment, the baselines', and the verdict of issue 21 as ``bench generalize`` judges
it (``generalize.autoscale_passes``; here the whole hour is scored).

``--decline`` adds a tenth-of-the-launch rate series over 10 days (:func:`write_decline`; minutes to replay).

    python scripts/autoscale_probes.py OUT_DIR [--run] [--json F] [--decline]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

START = pd.Timestamp("2023-11-16 18:00:00")


def write_hour(
    out: Path,
    rps: float,
    seed: int,
    *,
    mod: float,
    bursts_per_h: float = 0.0,
    burst_mult: float = 1.0,
    burst_s: float = 0.0,
    phase: float | None = None,
    period_s: float = 1_200.0,
    shift: tuple[float, float, float] | None = None,
) -> int:
    """One hour of requests in the Azure format; returns the number of requests. ``phase`` None: drawn (the
    smooth families), else fixed (the burst families). ``shift`` (start s, ramp s, rps after): the rate ramps
    linearly from ``rps`` to the new level and stays there (the level-shift family)."""
    rng = np.random.default_rng(seed)
    horizon = 3_600.0
    starts = rng.uniform(0, horizon, rng.poisson(bursts_per_h)) if bursts_per_h > 0 else np.zeros(0)
    top = max(rps, shift[2]) if shift else rps
    lam_max = top * (1 + mod) * max(1.0, burst_mult)
    n = rng.poisson(lam_max * horizon)
    t = np.sort(rng.uniform(0, horizon, n))
    ph = rng.uniform(0, 6.28) if phase is None else phase
    level = np.full_like(t, rps)
    if shift is not None:
        t0, ramp_s, after = shift
        level = rps + (after - rps) * np.clip((t - t0) / ramp_s, 0.0, 1.0)
    lam = level * (1 + mod * np.sin(2 * np.pi * t / period_s + ph))
    for s in starts:
        lam = np.where((t >= s) & (t < s + burst_s), lam * burst_mult, lam)
    t = t[rng.uniform(0, lam_max, n) < lam]
    m = len(t)
    gen = np.minimum(4096, np.maximum(1, np.round(rng.lognormal(np.log(129), 0.99, m)))).astype(int)
    ctx = np.maximum(1, np.round(rng.lognormal(np.log(1020), 0.5, m))).astype(int)
    ts = START + pd.to_timedelta(t, unit="s")
    frame = pd.DataFrame(
        {"TIMESTAMP": ts.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": ctx, "GeneratedTokens": gen}
    )
    frame.to_csv(out, index=False)
    return m


def write_all(out_dir: Path) -> list[Path]:
    """The 29 probe files, with the seeds the docs' table used."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[tuple[str, dict[str, Any]]] = [
        ("conv_s1", {"rps": 5.38, "seed": 1, "mod": 0.2}),
        ("conv_s2", {"rps": 5.38, "seed": 2, "mod": 0.2}),
        ("conv_s3", {"rps": 5.38, "seed": 3, "mod": 0.2}),
        ("conv_s4_r8", {"rps": 8.0, "seed": 4, "mod": 0.3}),
        ("conv_s5_r4", {"rps": 4.0, "seed": 5, "mod": 0.3}),
    ]
    for i, (rps, mod) in enumerate([(6.0, 0.2), (6.5, 0.2), (7.0, 0.1), (7.5, 0.1), (6.5, 0.35), (7.0, 0.3)], 1):
        files.append((f"convr_{i}", {"rps": rps, "seed": 200 + i, "mod": mod}))
    for i, (rps, nb) in enumerate([(5.4, 6), (5.4, 12), (7.0, 6), (4.0, 10), (6.0, 8), (9.0, 6)]):
        kw = {"mod": 0.3, "bursts_per_h": nb, "burst_mult": 3.0, "burst_s": 30.0, "phase": 1.0}
        files.append((f"convb_{i}", {"rps": rps, "seed": 100 + i, **kw}))
    mild = [(5.4, 6, 2.0, 10.0), (5.4, 10, 1.8, 15.0), (6.0, 6, 2.0, 10.0), (4.5, 8, 2.2, 10.0), (5.0, 12, 1.6, 20.0)]
    mild.append((6.0, 4, 1.8, 20.0))
    for i, (rps, nb, mult, length) in enumerate(mild):
        kw = {"mod": 0.15, "bursts_per_h": nb, "burst_mult": mult, "burst_s": length, "phase": 1.0}
        files.append((f"convm_{i}", {"rps": rps, "seed": 300 + i, **kw}))
    shifts = np.random.default_rng(500)
    for i in range(6):  # level shifts: 3-6 rps, ramping to 11-15 rps over 2-15 minutes at minute 30-50
        before, after = float(shifts.uniform(3, 6)), float(shifts.uniform(11, 15))
        t0, ramp_s = float(shifts.uniform(1_800, 3_000)), float(shifts.uniform(120, 900))
        kw = {"rps": before, "seed": 500 + i, "mod": 0.1, "shift": (t0, ramp_s, after)}
        files.append((f"shift_{i}", kw))
    paths = []
    for name, kw in files:
        p = out_dir / f"{name}.csv"
        write_hour(p, **kw)
        paths.append(p)
    return paths


def write_decline(out: Path, seed: int = 7, days: int = 10) -> None:
    """A rate series (``timestamp,series_id,value``, 1-minute steps) of a fleet whose traffic falls after its
    launch: two days at 60 rps, then 6 rps, both +-30 % over the day, and after the launch a 3x minute at Poisson
    times about every 3 hours (docs/autoscale.md, "A week's memory", session 35)."""
    rng = np.random.default_rng(seed)
    n = days * 24 * 60
    minute = np.arange(n)
    tod = (minute % 1440) / 1440.0
    rate = np.where(minute < 2 * 1440, 60.0, 6.0) * (1 + 0.3 * np.sin(2 * np.pi * (tod - 0.25)))
    burst = (rng.uniform(size=n) < 1 / 180) & (minute >= 2 * 1440)
    rate = np.where(burst, 3.0 * rate, rate)
    t = pd.date_range("2024-03-01", periods=n, freq="1min")
    frame = pd.DataFrame(
        {"timestamp": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "series_id": "decline", "value": rate.round(3)}
    )
    frame.to_csv(out, index=False)


def run(paths: list[Path]) -> dict[str, Any]:
    from gpufleet.bench.autoscale import BenchSettings, to_json
    from gpufleet.bench.autoscale import run as bench_run
    from gpufleet.bench.generalize import autoscale_passes

    rows: dict[str, Any] = {}
    for p in paths:
        (res,) = bench_run(p, st=BenchSettings(oracle=False))  # `gpufleet bench autoscale --trace P --no-oracle`
        pol = to_json(res)["policies"]
        rows[p.stem] = {"policies": pol, "pass": autoscale_passes(pol)}
        cells = "  ".join(
            f"{k} {v['gpu_hours']:.2f} @ {v['slo_attainment']:.4f}" for k, v in pol.items() if k != "gpufleet"
        )
        g = pol["gpufleet"]
        verdict = "PASS" if rows[p.stem]["pass"] else "fail"
        print(f"{p.stem:11s} gpufleet {g['gpu_hours']:.2f} @ {g['slo_attainment']:.4f} {verdict}   {cells}")
    print(f"{sum(r['pass'] for r in rows.values())} of {len(rows)} pass")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, help="where the probe CSVs are written")
    ap.add_argument("--run", action="store_true", help="replay each through `gpufleet bench autoscale`")
    ap.add_argument("--json", type=Path, help="with --run: write the rows here")
    ap.add_argument("--decline", action="store_true", help="also write (and with --run replay) decline.csv")
    a = ap.parse_args(argv)
    paths = write_all(a.out_dir)
    if a.decline:
        write_decline(a.out_dir / "decline.csv")
        paths.append(a.out_dir / "decline.csv")
    print(f"wrote {len(paths)} files to {a.out_dir}")
    if a.run:
        rows = run(paths)
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
