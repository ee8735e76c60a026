"""Hindsight bound of the replay model: the cheapest commitment schedule knowing the realized demand.

Same terms, lead time, capacities and prices as :mod:`gpufleet.procure.replay`; solved as a MILP (integer
GPUs committed per hour) with HiGHS through :func:`scipy.optimize.milp`. Variables: ``r_s`` GPUs committed
at hour ``s`` (only hours whose commitment starts inside the window) and, per hour and pay-per-use tier,
the GPU-hours bought from it (bounded by its capacity). Constraint per hour: reserved + bought >= demand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from gpufleet.domain.errors import ValidationError
from gpufleet.procure.replay import ReplayConfig, ReplayResult, cost_of_commits, overflow_tiers

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class HindsightSolution:
    result: ReplayResult  # the optimal schedule priced by the replay (the bound itself)
    lp_objective_usd: float  # the solver's objective (equals result.cost_usd up to tolerance)
    mip_gap: float


def hindsight_optimal(
    cfg: ReplayConfig, demand: FloatArray, *, integral: bool = True, time_limit_s: float = 60.0
) -> HindsightSolution:
    """Solve for the cost-minimal commitment schedule with perfect knowledge of ``demand``."""
    d = np.asarray(demand, dtype=np.float64)
    n = len(d)
    n_commit = max(n - cfg.lead_h, 0)
    tiers = overflow_tiers(cfg, d)
    single_tier = math.isinf(cfg.on_demand_quota_gpus) and not (
        cfg.checkpointable_share > 0 and cfg.spot_capacity_gpus > 0
    )
    single_tier = single_tier and cfg.secondary_capacity_gpus <= 0
    if integral and single_tier:
        # Exact and fast: with one overflow tier, split each hour's demand n + phi into whole GPUs (price p)
        # and one partial GPU (price p * phi). The coverage matrix is an interval matrix (totally
        # unimodular), the right-hand side is integer, so the LP's vertex solution is integral.
        ceil_d = np.ceil(d - 1e-9)
        phi = d - np.floor(d + 1e-9)
        phi = np.where(phi < 1e-9, 0.0, phi)
        tiers = [
            ("whole", cfg.on_demand_usd_per_gpu_h, np.full(n, np.inf)),
            ("partial", 0.0, (phi > 0).astype(np.float64)),
        ]
        partial_cost = cfg.on_demand_usd_per_gpu_h * phi
        integral = False
        d_rhs = ceil_d
    else:
        partial_cost = None
        d_rhs = d
    n_var = n_commit + n * len(tiers)
    # coverage matrix: hour t is covered by commits s with s + lead <= t < s + lead + term
    rows: list[npt.NDArray[np.int64]] = []
    cols: list[npt.NDArray[np.int64]] = []
    for s in range(n_commit):
        hours = np.arange(s + cfg.lead_h, min(s + cfg.lead_h + cfg.term_h, n), dtype=np.int64)
        rows.append(hours)
        cols.append(np.full(len(hours), s, dtype=np.int64))
    t_idx = np.arange(n, dtype=np.int64)
    for k in range(len(tiers)):
        rows.append(t_idx)
        cols.append(n_commit + k * n + t_idx)
    r_all = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c_all = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    a = sp.csr_array((np.ones(len(r_all)), (r_all, c_all)), shape=(n, n_var))
    active_h = np.minimum(cfg.term_h, n - np.arange(n_commit) - cfg.lead_h).astype(np.float64)
    tier_costs = [np.full(n, price) for _, price, _ in tiers]
    if partial_cost is not None:
        tier_costs[1] = partial_cost
    c = np.concatenate([cfg.reserved_usd_per_gpu_h * active_h, *tier_costs])
    ub = np.concatenate([np.full(n_commit, max(float(d.max(initial=0.0)), 0.0) + 1.0)] + [cap for *_, cap in tiers])
    integrality = np.concatenate([np.full(n_commit, 1 if integral else 0), np.zeros(n * len(tiers))])
    res = milp(
        c,
        constraints=LinearConstraint(a, lb=d_rhs, ub=np.inf),
        bounds=Bounds(np.zeros(n_var), ub),
        integrality=integrality,
        options={"time_limit": time_limit_s, "mip_rel_gap": 1e-6},
    )
    if res.x is None:
        raise ValidationError("demand", f"hindsight solve failed: {res.message}")
    commits = np.zeros(n)
    commits[:n_commit] = np.round(res.x[:n_commit]) if integral or partial_cost is not None else res.x[:n_commit]
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
    return HindsightSolution(cost_of_commits(cfg, d, commits), float(res.fun), gap)
