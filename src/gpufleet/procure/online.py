"""The control loop's ``Procurer``: the portfolio LP (the model the service's plan runs), forecasts taken as data.

At each procurement epoch it builds one SKU-region pair for the context's reserved pool (its price, term and lead
time; daily periods over ``min(term, max_horizon_days)``; existing commitments flat at ``committed_gpus_at_lead``),
with demand scenarios taken as data: the forecaster's quantile rows (daily means over the forecast horizon, then
held at their last day) and the planning model's flat history quantiles (:func:`scenarios_from_history`, the
scenarios ``gpufleet plan`` and the service use). :func:`optimize_portfolio` solves it; the plan's first order
(:func:`proposals_from_plan` then :func:`due_proposals`, the service's own path) becomes the proposal.

Issue 15: the loop runs this rather than the break-even rule because it was cheaper in the closed loop (seeds 1-6 of
the default scenario, docs/benchmarks/procure.md "Closed loop: portfolio LP vs break-even"); the break-even procurer
is kept only as the named baseline of that benchmark (:mod:`gpufleet.bench.procure`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.ports import PriceCatalog, ProcurementContext, ReservationProposal
from gpufleet.procure.baseline import on_demand_usd_per_gpu_h
from gpufleet.procure.planning import scenarios_from_history
from gpufleet.procure.portfolio import CommitTier, PairDemand, PortfolioProblem, optimize_portfolio
from gpufleet.procure.proposals import due_proposals, proposals_from_plan
from gpufleet.procure.replay import FloatArray

DAY_S = 86400


@dataclass(slots=True)
class PortfolioProcurer:
    """The portfolio LP as the loop's procurer; never proposes before ``min_history_h`` hours of history."""

    min_history_h: int = 7 * 24
    max_horizon_days: int = 90  # the break-even procurer's scenario horizon too
    prices: PriceCatalog = BUILTIN_PRICE_CATALOG
    name: str = "portfolio_lp"

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        hist = np.asarray(ctx.demand_history_gpus, dtype=np.float64)
        hist = np.where(np.isfinite(hist), hist, 0.0)
        if len(hist) < self.min_history_h:
            return []
        pool = ctx.pool
        on_demand = on_demand_usd_per_gpu_h(self.prices, ctx.sku_id, float(pool.price_usd_per_gpu_h))
        term_d = max(round(ctx.commitment_term_h / 24), 1)
        lead_d = math.ceil(pool.lead_time_s / DAY_S)
        horizon = max(min(term_d, self.max_horizon_days), lead_d + 1)
        scen = scenarios_from_history(hist, horizon)
        if ctx.forecast is not None:
            scen = np.vstack([scen, *[_daily(q, horizon) for q in ctx.forecast.values]])
        tier = CommitTier("reserved", pool.provider_id, float(pool.price_usd_per_gpu_h), term_d, lead_d)
        zero = np.zeros_like(scen)
        pair = PairDemand(
            ctx.sku_id,
            pool.region_id,
            scen,
            zero,
            zero,
            (tier,),
            on_demand,
            existing_gpus=np.full(horizon, float(ctx.committed_gpus_at_lead)),
        )
        problem = PortfolioProblem((pair,))
        plan = optimize_portfolio(problem)
        # the orders due now: those whose submit-by date falls within a week (the service's rule)
        # (period 0 is now; an order starting at period p must be submitted by p - lead)
        orders = due_proposals(
            proposals_from_plan(problem, plan, start_s=ctx.now_s, gpus_per_node=ctx.gpus_per_node), now_s=ctx.now_s
        )
        first = [o for o in orders if o.action in ("reserve", "renew")][:1]
        return [
            ReservationProposal(
                sku_id=ctx.sku_id,
                pool_id=pool.id,
                units=o.units,
                start_s=ctx.now_s + pool.lead_time_s,
                term_months=pool.term_months or 12,
                reason=f"portfolio_lp: {o.rationale}",
            )
            for o in first
        ]


def _daily(values: FloatArray, n_days: int) -> FloatArray:
    """Hourly forecast row -> daily means over ``n_days``, held at the last forecast day beyond its horizon."""
    v = np.asarray(values, dtype=np.float64)
    days = max(len(v) // 24, 1)
    means = v[: days * 24].reshape(days, -1).mean(axis=1) if len(v) >= 24 else np.array([float(v.mean())])
    out = np.full(n_days, float(means[-1]))
    out[: min(len(means), n_days)] = means[:n_days]
    return out
