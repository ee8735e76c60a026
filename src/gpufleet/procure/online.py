"""The ``Procurer`` port implemented with gpufleet's break-even policy (what the control loop can call).

At each procurement epoch it forms demand scenarios for the term a new reservation would cover (the same
hour of day on the freshest observed days, damped trend; plus the forecaster's quantiles when given,
tiled over the term), and commits whole nodes while the next GPU's expected saving reaches the reserved
price (on-demand price from the injected catalog) and the first covered hour needs it. Decisions every few days
make the hourly ramp of the bench policy moot, so growth is committed at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.reservations import term_seconds
from gpufleet.ports import PriceCatalog, ProcurementContext, ReservationProposal
from gpufleet.procure.baseline import whole_node_proposal
from gpufleet.procure.policies import GpufleetReservationPolicy, units_worth_committing
from gpufleet.procure.replay import FloatArray, ReplayConfig

HOUR_S = 3600


@dataclass(slots=True)
class BreakevenProcurer:
    """Break-even commitment on scenarios; never proposes before ``min_history_h`` hours of history."""

    min_history_h: int = 7 * 24
    max_term_h: int = 90 * 24  # scenarios beyond this look the same; bounds the work per decision
    # the on-demand price a commitment is weighed against; the control loop injects its catalog (the default
    # is the built-in list, for callers that have not been wired yet)
    prices: PriceCatalog = BUILTIN_PRICE_CATALOG

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        hist = np.asarray(ctx.demand_history_gpus, dtype=np.float64)
        hist = np.where(np.isfinite(hist), hist, 0.0)
        if len(hist) < self.min_history_h:
            return []
        pool = ctx.pool
        price = self.prices.list_price(ctx.sku_id)
        on_demand = (
            float(price.on_demand)
            if price is not None
            else float(pool.price_usd_per_gpu_h) / self.prices.reserved_to_on_demand
        )
        term_h = min(term_seconds(pool.term_months or 12) // HOUR_S, self.max_term_h)
        lead_h = pool.lead_time_s // HOUR_S
        cfg = ReplayConfig(
            term_h=term_h,
            lead_h=lead_h,
            reserved_usd_per_gpu_h=float(pool.price_usd_per_gpu_h),
            on_demand_usd_per_gpu_h=on_demand,
            spot_usd_per_gpu_h=on_demand,
            secondary_usd_per_gpu_h=on_demand,
        )
        policy = GpufleetReservationPolicy(ramp_h=1, min_history_h=24, fill_unobserved=False, level_sigma0=0.0)
        scen = policy.scenarios(len(hist), hist, cfg)
        if ctx.forecast is not None:
            scen = np.vstack([scen, *[_tile(q, term_h) for q in ctx.forecast.values]])
        have = float(ctx.committed_gpus_at_lead)
        excess = scen - have
        ok = np.isfinite(excess)
        worth = units_worth_committing(excess[ok], cfg.alpha)
        first = excess[:, 0][np.isfinite(excess[:, 0])]
        needed = units_worth_committing(first, policy.first_hour_use)
        gpus = min(worth, needed)
        return whole_node_proposal(
            ctx,
            gpus,
            f"breakeven: {math.floor(gpus / ctx.gpus_per_node) * ctx.gpus_per_node} GPUs above {have:.0f} committed "
            f"are expected in use at least {cfg.alpha:.0%} of the term (reserved/on-demand price)",
        )


def _tile(values: FloatArray, n: int) -> FloatArray:
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return np.full(n, np.nan)
    return np.resize(v, n)
