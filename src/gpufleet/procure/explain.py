"""Explanations of portfolio decisions: break-even utilization, expected utilization, quantile covered.

Committed capacity is stacked (existing first, then tiers from the longest term to the shortest); each
commitment's layer at period ``t`` spans ``[below_t, below_t + C_t]``. Its expected utilization is the
expected demand falling inside the layer over the commitment's window, divided by the layer's GPU-periods;
the quantile covered is the share of scenario-periods whose total demand is at most the layer's top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gpufleet.procure.portfolio import CommitDecision, PortfolioProblem

FloatArray = npt.NDArray[np.float64]


def explain_commits(
    problem: PortfolioProblem,
    capacity: dict[str, dict[str, FloatArray]],
    commits: dict[str, dict[str, FloatArray]],
    *,
    min_gpus: float = 1e-6,
) -> list[CommitDecision]:
    from gpufleet.procure.portfolio import CommitDecision

    out: list[CommitDecision] = []
    for p in problem.pairs:
        d_all = p.serving + p.training + p.checkpointable
        n_t = d_all.shape[1]
        below = np.zeros(n_t) if p.existing_gpus is None else np.asarray(p.existing_gpus, dtype=np.float64).copy()
        order = sorted(p.commit_tiers, key=lambda k: -(k.term_periods if k.term_periods is not None else 10**9))
        for tier in order:
            cap = capacity[p.key][tier.name]
            starts = np.nonzero(commits[p.key][tier.name] > min_gpus)[0]
            for s in starts:
                end = n_t if tier.term_periods is None else min(n_t, int(s) + tier.term_periods)
                sl = slice(int(s), end)
                top = below[sl] + cap[sl]
                inside = np.clip(d_all[:, sl] - below[sl], 0.0, cap[sl])
                paid = float(cap[sl].sum())
                util = float(inside.mean(axis=0).sum() / paid) if paid > 0 else 0.0
                covered = float((d_all[:, sl] <= top + 1e-9).mean())
                breakeven = tier.price_usd_per_gpu_h / p.on_demand_usd_per_gpu_h
                gpus = float(commits[p.key][tier.name][s])
                reason = "expected_use_above_breakeven" if util >= breakeven - 1e-6 else "service_level_or_cap"
                out.append(
                    CommitDecision(
                        pair=p.key,
                        tier=tier.name,
                        provider_id=tier.provider_id,
                        start_period=int(s),
                        gpus=gpus,
                        term_periods=tier.term_periods,
                        est_cost_usd=gpus * (end - int(s)) * problem.period_h * tier.price_usd_per_gpu_h,
                        breakeven_utilization=breakeven,
                        expected_utilization=util,
                        demand_quantile_covered=covered,
                        reason=reason,
                    )
                )
            below = below + cap
    return out
