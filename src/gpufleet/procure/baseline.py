"""Baseline procurement: commit to a lookback percentile of measured demand, respecting the lead time.

This is what cloud reservation recommenders do (a percentile of the last 30 days); the portfolio optimizer
replaces it and is measured against it.
"""

from __future__ import annotations

import math

import numpy as np

from gpufleet.ports import PriceCatalog, ProcurementContext, ReservationProposal


class LookbackPercentile:
    def __init__(self, percentile: float = 50.0, lookback_h: int = 30 * 24, min_history_h: int = 7 * 24) -> None:
        self.percentile = percentile
        self.lookback_h = lookback_h
        self.min_history_h = min_history_h

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        hist = ctx.demand_history_gpus[-self.lookback_h :]
        hist = hist[~np.isnan(hist)]
        if len(hist) < self.min_history_h:
            return []
        target = float(np.percentile(hist, self.percentile))
        return whole_node_proposal(
            ctx,
            target - ctx.committed_gpus_at_lead,
            f"lookback_p{self.percentile:g}: target {target:.0f} GPUs, committed {ctx.committed_gpus_at_lead}",
        )


def whole_node_proposal(
    ctx: ProcurementContext, gpus: float, reason: str, *, round_up: bool = False
) -> list[ReservationProposal]:
    """Reserve ``gpus`` in whole nodes (rounded down, or up with ``round_up``) from the context's pool, starting
    after its lead time."""
    per = ctx.gpus_per_node
    nodes = math.ceil(gpus / per - 1e-9) if round_up else math.floor(gpus / per)
    if nodes <= 0:
        return []
    return [
        ReservationProposal(
            sku_id=ctx.sku_id,
            pool_id=ctx.pool.id,
            units=nodes * ctx.gpus_per_node,
            start_s=ctx.now_s + ctx.pool.lead_time_s,
            term_months=ctx.pool.term_months or 12,
            reason=reason,
        )
    ]


def on_demand_usd_per_gpu_h(prices: PriceCatalog, sku_id: str, reserved_usd_per_gpu_h: float) -> float:
    """The on-demand price a commitment is weighed against: the catalog's list price, or the reserved price over
    the catalog's reserved/on-demand ratio for a SKU it does not list."""
    price = prices.list_price(sku_id)
    return float(price.on_demand) if price is not None else reserved_usd_per_gpu_h / prices.reserved_to_on_demand
