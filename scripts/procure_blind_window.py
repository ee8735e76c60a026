"""Issue 21, procurement: how much of each failing row is decided before any rule's commitment has been priced.

For one series and term/lead: the hour ``t_info`` at which the first commitment of any rule (the forecast policy
and the four baselines) becomes active (before it, every rule's realised cost is the same all-on-demand bill, so a
choice among them by realised cost has nothing to go on), the last hour whose commitment starts inside the window,
and, for each rule followed during the blind hours, the cheapest cost reachable afterwards *with hindsight*
(commitments before ``t_info`` fixed to the rule's, any schedule after): a lower bound on every policy that follows
that rule while blind. Usage:

    python scripts/procure_blind_window.py ../shared/data  # every procurement series of bench generalize
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from gpufleet.bench import generalize_data as gd
from gpufleet.bench.generalize import TERM_LEAD_H
from gpufleet.bench.procure import ProcurerPolicy, gpufleet_policy
from gpufleet.control.procurement import ForecastLedProcurer
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.procure.hindsight import _coverage, _segments, hindsight_optimal
from gpufleet.procure.policies import baseline_policies
from gpufleet.procure.replay import ReplayConfig, cost_of_commits, replay


def prefix_fixed_optimum(cfg: ReplayConfig, d: np.ndarray, commits: np.ndarray, t_fix: int) -> float:
    """Cheapest cost with ``commits[:t_fix]`` fixed and the rest chosen in hindsight (the segment LP)."""
    n = len(d)
    r_rows, r_cols, n_commit = _coverage(cfg, n)
    active_h = np.minimum(cfg.term_h, n - np.arange(n_commit) - cfg.lead_h).astype(np.float64)
    seg_t, seg_slope, seg_len, _g0 = _segments(cfg, d)
    n_var = n_commit + len(seg_t)
    rows = np.concatenate([r_rows, seg_t])
    cols = np.concatenate([r_cols, n_commit + np.arange(len(seg_t))])
    vals = np.concatenate([np.ones(len(r_rows)), -np.ones(len(seg_t))])
    a = sp.csr_array((vals, (rows, cols)), shape=(n, n_var))
    lb = np.zeros(n_var)
    ub = np.concatenate([np.full(n_commit, np.ceil(d.max()) + 1.0), seg_len])
    k = min(t_fix, n_commit)
    lb[:k] = ub[:k] = commits[:k]
    ub[:k] = np.maximum(ub[:k], lb[:k])
    res = linprog(
        np.concatenate([cfg.reserved_usd_per_gpu_h * active_h, seg_slope]),
        A_eq=a,
        b_eq=np.zeros(n),
        bounds=np.column_stack([lb, ub]),
        method="highs-ds",
    )
    x = np.round(res.x[:n_commit])
    full = np.zeros(n)
    full[:n_commit] = x
    return cost_of_commits(cfg, d, full).cost_usd


def main(root: Path, only: list[str]) -> None:
    series = gd.procure_series(root)
    for sid, d in series.items():
        for term, lead in TERM_LEAD_H:
            tid = f"{sid} {term}/{lead}"
            if only and tid not in only:
                continue
            cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=term, lead_h=lead)
            opt = hindsight_optimal(cfg, d).result.cost_usd
            alone = ProcurerPolicy(ForecastLedProcurer(hedge=None), "forecast")
            rules = {"forecast": alone, **{p.name: p for p in baseline_policies()}}
            runs = {name: replay(cfg, d, p) for name, p in rules.items()}  # type: ignore[arg-type]
            runs["gpufleet (hedged)"] = replay(cfg, d, gpufleet_policy())
            act = [int(np.argmax(r.reserved_gpus > 0)) for r in runs.values() if r.reserved_gpus.max() > 0]
            t_info = min(act) if act else len(d)
            last = len(d) - lead - 1
            bar = min(r.cost_usd for k, r in runs.items() if k not in ("forecast", "gpufleet (hedged)")) / opt
            bounds = {k: prefix_fixed_optimum(cfg, d, r.commits, t_info) / opt for k, r in runs.items()}
            blind = min(t_info, last + 1) / (last + 1)
            print(
                f"{tid}: hours {len(d)}, first rule priced at h{t_info}, last in-window commit h{last}, blind share "
                f"{blind:.2f}; bar (best baseline) {bar:.4f}; best reachable after following each rule while blind: "
                + ", ".join(f"{k} {v:.4f}" for k, v in bounds.items()),
                flush=True,
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
