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

The program is the commitment LP of :mod:`gpufleet.control.commitments` (the same one gpufleet's procurer
solves on a projection). ``tests/unit/test_sim_bound.py`` checks it against brute force on a tiny case and
against :func:`gpufleet.procure.hindsight.hindsight_optimal` (the same model with constant capacities).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gpufleet.control.commitments import CommitmentProblem, solve_commitments
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


def bound_inputs(w: World) -> dict[str, CommitmentProblem]:
    """The bound's inputs for every SKU-region pool of a world (its demand draws: run or not, the same)."""
    n = w.sc.days * 24
    horizon = float(w.horizon_s)
    k = w.pods.n_jobs
    arrival = np.minimum(np.asarray(w.pods.arrival[:k], dtype=np.float64), horizon)  # later: outside the window
    end = np.minimum(arrival + np.asarray(w.pods.work[:k], dtype=np.float64), horizon)
    gpus = np.asarray(w.pods.gpus[:k], dtype=np.float64)
    sku = np.asarray(w.pods.sku[:k], dtype=np.int64)
    ckpt = np.asarray(w.pods.ckpt[:k], dtype=np.int64) > 0
    out: dict[str, CommitmentProblem] = {}
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
        out[key] = CommitmentProblem(
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
        b = solve_commitments(inp)
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
