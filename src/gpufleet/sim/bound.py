"""The hindsight bound of a simulated world: a lower bound on the cost of its realized demand, NOT a policy.

For each SKU-region pool of the scenario, the realized GPU demand is taken as it arrives and needs no more:

* training: every job that arrived (planned runs that happened included) holds its GPUs from its arrival for
  exactly its work, never queued, never interrupted, never redone (perfect packing: the hourly mean of GPUs);
* serving: each control period, replicas equal to need, ``max(min, ceil(rps / rps_per_replica))`` (at most the
  fleet's max), times the GPUs per replica.

Then the exact procurement optimum over that hourly demand is solved as a linear program with perfect
hindsight: commitments of any size may start at any hour (active after the reserved lead time, for the pool's
term, paid for their hours inside the horizon, the same window the simulator bills), on top of the scenario's
initial commitments (sunk, billed as in every loop); the rest of each hour's demand is bought from spot (only
checkpointable training, within the spot capacity), secondary (within its capacity) and on demand. On-demand
quota and stock-outs are relaxed (a bound may only drop constraints) so every hour is feasible; fractional
GPUs are allowed (a relaxation of whole-node commitments). Every relaxation lowers the figure, so no loop
running the same work can pay less; a loop that leaves work queued at the end of the horizon did less work and
can come in under it.

The program per pool, over hours ``t`` (``c_s`` GPUs committed at hour ``s``, ``R_t`` active new commitment,
``E_t`` initial commitments, ``x`` GPUs bought per tier)::

    min  sum_s p_res * active_h(s) * c_s + sum_t (p_spot x_spot_t + p_sec x_sec_t + p_od x_od_t)
    s.t. R_t - R_{t-1} - c_{t-lead} + c_{t-lead-term} = 0            (the commitments active at t)
         R_t + E_t + x_spot_t + x_sec_t + x_od_t >= d_t               (demand met)
         0 <= x_spot_t <= min(ckpt_t, spot_cap),  0 <= x_sec_t <= sec_cap,  c, R, x_od >= 0

The recurrence keeps the matrix banded (a few entries per row), so half a year of hours solves in well under a
second with HiGHS. ``tests/unit/test_sim_bound.py`` checks it against brute force on a tiny case and against
:func:`gpufleet.procure.hindsight.hindsight_optimal` (the same model with constant capacities).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.optimize import linprog

from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import Tier

if TYPE_CHECKING:
    from gpufleet.sim.world import World

FloatArray = npt.NDArray[np.float64]
HOUR_S = 3600
BOUND_LABEL = "hindsight bound: lower bound on the cost of the realized demand, not a policy"
BOUND_METHOD = (
    "LP over hourly realized demand per SKU-region: jobs run at arrival with perfect packing, serving replicas "
    "equal to need; commitments of any size at any hour with perfect hindsight (pool term and lead time), "
    "initial commitments sunk; overflow on spot (checkpointable only, within capacity), secondary (within "
    "capacity) and on demand (quota and stock-outs relaxed)"
)


@dataclass(frozen=True, slots=True)
class PoolBoundInput:
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
class PoolBound:
    cost_usd: float
    cost_by_tier_usd: dict[str, float]
    commits_gpus: FloatArray  # GPUs committed at each hour


def solve_pool(p: PoolBoundInput) -> PoolBound:
    """The exact LP optimum of one pool (see the module docstring)."""
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
    return PoolBound(float(res.fun) + sunk, by_tier, np.asarray(x[:n_c], dtype=np.float64))


def hourly_mean(starts_s: FloatArray, ends_s: FloatArray, gpus: FloatArray, n_hours: int) -> FloatArray:
    """Mean GPUs held per hour by intervals ``[start, end)`` holding ``gpus`` each (exact integral per hour)."""
    edges = np.arange(n_hours + 1, dtype=np.float64) * HOUR_S

    def integral(at: FloatArray) -> FloatArray:  # sum over intervals of gpus * (edge - at)+
        order = np.argsort(at)
        a, g = at[order], gpus[order]
        cg = np.concatenate([[0.0], np.cumsum(g)])
        cga = np.concatenate([[0.0], np.cumsum(g * a)])
        k = np.searchsorted(a, edges, side="left")
        return np.asarray(edges * cg[k] - cga[k], dtype=np.float64)

    held = integral(np.asarray(starts_s, dtype=np.float64)) - integral(np.asarray(ends_s, dtype=np.float64))
    return np.asarray(np.diff(held) / HOUR_S, dtype=np.float64)


def bound_inputs(w: World) -> dict[str, PoolBoundInput]:
    """The bound's inputs for every SKU-region pool of a world (its demand draws: run or not, the same)."""
    n = w.sc.days * 24
    horizon = float(w.horizon_s)
    k = w.n_jobs
    arrival = np.asarray(w.p_arrival[:k], dtype=np.float64)
    end = np.minimum(arrival + np.asarray(w.p_work[:k], dtype=np.float64), horizon)
    gpus = np.asarray(w.p_gpus[:k], dtype=np.float64)
    sku = np.asarray(w.p_sku[:k], dtype=np.int64)
    ckpt = np.asarray(w.p_ckpt[:k], dtype=np.int64) > 0
    out: dict[str, PoolBoundInput] = {}
    for s, spec in w.pool_specs.items():
        mine = sku == s
        demand = hourly_mean(arrival[mine], end[mine], gpus[mine], n)
        ck = hourly_mean(arrival[mine & ckpt], end[mine & ckpt], gpus[mine & ckpt], n)
        for fr in w.fleets:
            if fr.sku_idx != s:
                continue
            sc_ = fr.scaling
            reps = np.ceil(np.asarray(fr.rps, dtype=np.float64) / sc_.target_rps_per_replica - 1e-9)
            reps = np.clip(reps, sc_.min_replicas, sc_.max_replicas) * fr.spec.gpus_per_replica
            per_h = max(1, HOUR_S // w.period_s)
            m = min(len(reps) // per_h, n)
            demand[:m] += reps[: m * per_h].reshape(m, per_h).mean(axis=1)
        initial = np.zeros(n)
        for r in spec.reservations:
            initial[: min(n, math.ceil(r.remaining_months * 730))] += r.gpus
        prices = {pr.pool.tier: float(pr.pool.price_usd_per_gpu_h) for pr in w.fleet.pools if pr.sku_idx == s}
        key = f"{spec.sku}@{spec.region}"
        out[key] = PoolBoundInput(
            demand,
            ck,
            initial,
            term_h=spec.reserved_term_months * 730,
            lead_h=math.ceil(spec.reserved_lead_time_h),
            reserved_usd_per_gpu_h=prices[Tier.RESERVED],
            spot_usd_per_gpu_h=prices[Tier.SPOT],
            secondary_usd_per_gpu_h=prices[Tier.SECONDARY],
            on_demand_usd_per_gpu_h=prices[Tier.ON_DEMAND],
            spot_capacity_gpus=float(spec.spot_capacity_gpus),
            secondary_capacity_gpus=float(spec.secondary_capacity_gpus),
        )
    return out


def hindsight_bound(w: World) -> dict[str, Any]:
    """The comparison document's ``hindsight_bound`` entry for a world's realized demand."""
    total = 0.0
    by_tier = {t.value: 0.0 for t in (Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)}
    pools: dict[str, dict[str, float]] = {}
    for key, inp in bound_inputs(w).items():
        b = solve_pool(inp)
        total += b.cost_usd
        for tier, usd in b.cost_by_tier_usd.items():
            by_tier[tier] += usd
        pools[key] = {
            "cost_usd": round(b.cost_usd, 2),
            "demand_gpu_hours": round(float(inp.demand_gpus.sum()), 1),
            "committed_gpus": round(float(b.commits_gpus.sum()), 1),
        }
    return {
        "label": BOUND_LABEL,
        "total_cost_usd": round(total, 2),
        "cost_by_tier_usd": {k: round(v, 2) for k, v in by_tier.items()},
        "method": BOUND_METHOD,
        "pools": pools,
    }
