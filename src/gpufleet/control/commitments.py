"""The commitment LP: the cheapest reservations for an hourly GPU demand series, with perfect knowledge of it.

Used by the simulator's hindsight bound on the realized demand (sim/bound.py). (gpufleet's procurer,
control/procurement.py, decides on a projected demand with the marginal saving of each node instead: the same
tiers and prices, one node at a time.)

Over hours ``t`` (``c_s`` GPUs committed at hour ``s``, ``R_t`` active new commitment, ``E_t`` commitments in
place, ``x`` GPUs bought per pay-per-use tier)::

    min  sum_s p_res * active_h(s) * c_s + sum_t (p_spot x_spot_t + p_sec x_sec_t + p_od x_od_t)
    s.t. R_t - R_{t-1} - c_{t-lead} + c_{t-lead-term} = 0            (the commitments active at t)
         R_t + E_t + x_spot_t + x_sec_t + x_od_t >= d_t               (demand met)
         0 <= x_spot_t <= min(ckpt_t, spot_cap),  0 <= x_sec_t <= sec_cap,  c, R, x_od >= 0

A commitment is paid for its hours inside the window (as the simulator bills). The recurrence keeps the matrix
banded (a few entries per row), so half a year of hours solves in well under a second with HiGHS;
fractional GPUs are allowed (the bound relaxes whole nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import Tier

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CommitmentProblem:
    """One SKU-region: hourly demand (GPUs), its checkpointable part, commitments in place, prices, limits."""

    demand_gpus: FloatArray
    checkpointable_gpus: FloatArray
    initial_reserved_gpus: FloatArray
    term_h: int
    lead_h: int
    reserved_usd_per_gpu_h: float
    spot_usd_per_gpu_h: float
    secondary_usd_per_gpu_h: float
    on_demand_usd_per_gpu_h: float
    spot_capacity_gpus: float
    secondary_capacity_gpus: float


@dataclass(frozen=True, slots=True)
class CommitmentPlan:
    cost_usd: float
    cost_by_tier_usd: dict[str, float]
    commits_gpus: FloatArray  # GPUs committed at each hour


def solve_commitments(p: CommitmentProblem) -> CommitmentPlan:
    """The exact LP optimum of one SKU-region (see the module docstring)."""
    import scipy.sparse as sp  # here, not at module level: scipy.optimize and .sparse take ~0.5 s to import
    from scipy.optimize import linprog

    d = np.asarray(p.demand_gpus, dtype=np.float64)
    n = len(d)
    if n == 0 or not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValidationError("demand_gpus", "must be a non-empty, finite, non-negative hourly series")
    if p.term_h <= 0 or p.lead_h < 0:
        raise ValidationError("term_h" if p.term_h <= 0 else "lead_h", "term must be > 0 h and lead >= 0 h")
    e = np.asarray(p.initial_reserved_gpus, dtype=np.float64)
    ckpt = np.minimum(np.asarray(p.checkpointable_gpus, dtype=np.float64), d)
    need = np.maximum(d - e, 0.0)
    n_c = max(n - p.lead_h, 0)  # a commitment made later would start after the horizon
    # variable blocks: c (n_c), R (n), spot (n), sec (n), od (n)
    o_r, o_sp = n_c, n_c + n
    o_se, o_od, n_var = o_sp + n, o_sp + 2 * n, n_c + 4 * n
    t = np.arange(n)
    rows = [t, t[1:]]
    cols = [o_r + t, o_r + t[1:] - 1]
    vals = [np.ones(n), -np.ones(n - 1)]
    s_on = t - p.lead_h  # commitment that becomes active at t
    ok = (s_on >= 0) & (s_on < n_c)
    rows.append(t[ok])
    cols.append(s_on[ok])
    vals.append(-np.ones(int(ok.sum())))
    s_off = t - p.lead_h - p.term_h  # commitment whose term ends at t
    ok = (s_off >= 0) & (s_off < n_c)
    rows.append(t[ok])
    cols.append(s_off[ok])
    vals.append(np.ones(int(ok.sum())))
    a_eq = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n_var))
    # demand rows as -(R + spot + sec + od) <= -need
    cover_cols = np.concatenate([o_r + t, o_sp + t, o_se + t, o_od + t])
    a_ub = sp.csr_array((-np.ones(4 * n), (np.tile(t, 4), cover_cols)), shape=(n, n_var))
    active_h = np.minimum(p.term_h, n - np.arange(n_c) - p.lead_h).astype(np.float64)
    cost = np.concatenate(
        [
            p.reserved_usd_per_gpu_h * active_h,
            np.zeros(n),
            np.full(n, p.spot_usd_per_gpu_h),
            np.full(n, p.secondary_usd_per_gpu_h),
            np.full(n, p.on_demand_usd_per_gpu_h),
        ]
    )
    ub = np.concatenate(
        [
            np.full(n_c, np.inf),
            np.full(n, np.inf),
            np.minimum(ckpt, p.spot_capacity_gpus),
            np.full(n, p.secondary_capacity_gpus),
            np.full(n, np.inf),
        ]
    )
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=-need,
        A_eq=a_eq,
        b_eq=np.zeros(n),
        bounds=np.column_stack([np.zeros(n_var), ub]),
        method="highs",
    )
    if res.x is None or res.status != 0:
        raise ValidationError("hindsight_bound", f"the bound's LP failed: {res.message}")
    x = res.x
    sunk = p.reserved_usd_per_gpu_h * float(e.sum())
    by_tier = {
        Tier.RESERVED.value: float(cost[:n_c] @ x[:n_c]) + sunk,
        Tier.SPOT.value: p.spot_usd_per_gpu_h * float(x[o_sp : o_sp + n].sum()),
        Tier.SECONDARY.value: p.secondary_usd_per_gpu_h * float(x[o_se : o_se + n].sum()),
        Tier.ON_DEMAND.value: p.on_demand_usd_per_gpu_h * float(x[o_od : o_od + n].sum()),
    }
    return CommitmentPlan(float(res.fun) + sunk, by_tier, np.asarray(x[:n_c], dtype=np.float64))
