"""Hindsight bound of the replay model: the cheapest commitment schedule knowing the realized demand.

Same terms, lead time, capacities and prices as :mod:`gpufleet.procure.replay`. Variables: ``r_s`` whole
GPUs committed at hour ``s`` (only hours whose commitment starts inside the window).

Exact method (``method="segments"``, the default): for integer reserved capacity ``R`` the hourly overflow
cost ``g_t(R)`` (cheapest-first fill of spot, secondary, on-demand, then priced unmet) is convex and
decreasing. Its values at integers, joined linearly, form a convex piecewise-linear function with integer
breakpoints (0, floor/ceil of each kink, ceil of demand). Writing ``R_t = sum_j y_tj`` over those segments
(``0 <= y_tj <= segment length``, cost = segment slope) gives rows ``A r - sum_j y_tj = 0`` where ``A`` is an
interval matrix (a commitment covers consecutive hours) and the ``y`` columns are unit columns: the matrix is
totally unimodular, bounds and right-hand side are integers, so HiGHS' vertex solution is integral. An LP
of that size solves in well under a second for months of hours.

``method="milp"`` solves the direct MILP (continuous tier variables, integer ``r``) and serves as a cross-check;
``method="lp"`` is the continuous relaxation (fractional GPUs), a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from gpufleet.domain.errors import ValidationError
from gpufleet.procure.replay import ReplayConfig, ReplayResult, cost_of_commits, overflow_tiers

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class HindsightSolution:
    result: ReplayResult  # the optimal schedule priced by the replay (the bound itself)
    lp_objective_usd: float  # the solver's objective (equals result.cost_usd up to tolerance)
    method: str


def _coverage(cfg: ReplayConfig, n: int) -> tuple[IntArray, IntArray, int]:
    """(hour, commit) index pairs of the interval matrix: commit ``s`` covers ``[s + lead, s + lead + term)``."""
    n_commit = max(n - cfg.lead_h, 0)
    rows, cols = [], []
    for s in range(n_commit):
        hours = np.arange(s + cfg.lead_h, min(s + cfg.lead_h + cfg.term_h, n), dtype=np.int64)
        rows.append(hours)
        cols.append(np.full(len(hours), s, dtype=np.int64))
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0
    return np.concatenate(rows), np.concatenate(cols), n_commit


def overflow_cost(cfg: ReplayConfig, demand: FloatArray, reserved: FloatArray) -> FloatArray:
    """Hourly pay-per-use cost of serving ``demand`` above ``reserved`` (cheapest tier first, unmet priced)."""
    left = np.maximum(demand - reserved, 0.0)
    cost = np.zeros_like(left)
    for _, price, cap in overflow_tiers(cfg, demand):
        take = np.minimum(left, cap)
        cost += take * price
        left = left - take
    return cost


def _segments(cfg: ReplayConfig, d: FloatArray) -> tuple[IntArray, FloatArray, FloatArray, float]:
    """Per-hour convex segments of the overflow cost over integer R: (hour, slope, length), and g(0) total."""
    tiers = overflow_tiers(cfg, d)
    bounds = np.cumsum(np.vstack([cap for *_, cap in tiers[:-1]]), axis=0)  # boundaries within overflow
    hours: list[IntArray] = []
    slopes: list[FloatArray] = []
    lengths: list[FloatArray] = []
    top = np.ceil(d - 1e-9)
    kinks = d[None, :] - bounds  # R at which overflow crosses a tier boundary
    pts = [np.zeros_like(d), top, np.floor(d + 1e-9)]
    for k in kinks:
        kk = np.where(np.isfinite(k), k, 0.0)
        pts += [np.clip(np.floor(kk), 0, top), np.clip(np.ceil(kk), 0, top)]
    grid = np.sort(np.vstack(pts), axis=0)  # (n_points, n_hours), duplicates give zero-length segments
    g = np.vstack([overflow_cost(cfg, d, row) for row in grid])
    length = np.diff(grid, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(length > 0, np.diff(g, axis=0) / np.where(length > 0, length, 1.0), 0.0)
    keep = length > 0
    t_idx = np.broadcast_to(np.arange(len(d), dtype=np.int64), length.shape)
    hours.append(t_idx[keep])
    slopes.append(slope[keep])
    lengths.append(length[keep])
    # beyond demand: more capacity saves nothing (slope 0, unbounded)
    hours.append(np.arange(len(d), dtype=np.int64))
    slopes.append(np.zeros(len(d)))
    lengths.append(np.full(len(d), np.inf))
    return np.concatenate(hours), np.concatenate(slopes), np.concatenate(lengths), float(g[0].sum())


def hindsight_optimal(
    cfg: ReplayConfig, demand: FloatArray, *, method: str = "segments", time_limit_s: float = 60.0
) -> HindsightSolution:
    """Solve for the cost-minimal commitment schedule with perfect knowledge of ``demand``."""
    d = np.asarray(demand, dtype=np.float64)
    if d.ndim != 1 or len(d) == 0 or not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValidationError("demand", "must be a non-empty, finite, non-negative 1-D series")
    n = len(d)
    r_rows, r_cols, n_commit = _coverage(cfg, n)
    active_h = np.minimum(cfg.term_h, n - np.arange(n_commit) - cfg.lead_h).astype(np.float64)
    r_cost = cfg.reserved_usd_per_gpu_h * active_h
    r_ub = np.full(n_commit, math.ceil(float(d.max())) + 1.0)
    if method == "segments":
        seg_t, seg_slope, seg_len, g0 = _segments(cfg, d)
        n_var = n_commit + len(seg_t)
        rows = np.concatenate([r_rows, seg_t])
        cols = np.concatenate([r_cols, n_commit + np.arange(len(seg_t), dtype=np.int64)])
        vals = np.concatenate([np.ones(len(r_rows)), -np.ones(len(seg_t))])
        a = sp.csr_array((vals, (rows, cols)), shape=(n, n_var))
        res = linprog(
            np.concatenate([r_cost, seg_slope]),
            A_eq=a,
            b_eq=np.zeros(n),
            bounds=np.column_stack([np.zeros(n_var), np.concatenate([r_ub, seg_len])]),
            method="highs-ds",  # dual simplex: a vertex, hence integral here
            options={"time_limit": time_limit_s},
        )
        offset = g0
    elif method in ("milp", "lp"):
        tiers = overflow_tiers(cfg, d)
        n_var = n_commit + n * len(tiers)
        t_idx = np.arange(n, dtype=np.int64)
        rows = np.concatenate([r_rows, *[t_idx for _ in tiers]])
        cols = np.concatenate([r_cols, *[n_commit + k * n + t_idx for k in range(len(tiers))]])
        a = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(n, n_var))
        res = milp(
            np.concatenate([r_cost, *[np.full(n, price) for _, price, _ in tiers]]),
            constraints=LinearConstraint(a, lb=d, ub=np.inf),
            bounds=Bounds(np.zeros(n_var), np.concatenate([r_ub, *[cap for *_, cap in tiers]])),
            integrality=np.concatenate([np.full(n_commit, 1 if method == "milp" else 0), np.zeros(n * len(tiers))]),
            options={"time_limit": time_limit_s, "mip_rel_gap": 1e-7},
        )
        offset = 0.0
    else:
        raise ValidationError("method", f"must be segments, milp or lp, got {method!r}")
    if res.x is None or res.status not in (0,):
        raise ValidationError("demand", f"hindsight solve failed: {res.message}")
    commits = np.zeros(n)
    raw = res.x[:n_commit]
    commits[:n_commit] = raw if method == "lp" else np.round(raw)
    if method == "segments" and n_commit and float(np.abs(raw - np.round(raw)).max()) > 1e-6:
        raise ValidationError("demand", "hindsight LP returned a fractional vertex (solver tolerance)")
    return HindsightSolution(cost_of_commits(cfg, d, commits), float(res.fun) + offset, method)
