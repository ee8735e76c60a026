"""gpufleet's procurement stage in the loop: forecast-led commitments solved as a model-predictive LP.

At each procurement epoch, for one SKU-region:

1. project hourly demand over the next ``lead + 2 x term`` hours: the last four weeks of measured demand
   (hour-of-week aligned, tiled), brought to today's level and grown by the trend of its daily medians
   (Theil-Sen slope of their logarithm where both halves of the window agree, clipped to ``-1%..+0.6%`` a
   day, total growth at most ``max_growth``);
   a training burst seen for two of the last four weeks stays in the projection half of the time, which is
   below the break-even use of a commitment, so lumpy runs are left to pay-per-use tiers;
2. solve the commitment LP (:mod:`gpufleet.control.commitments`) on that projection with the commitments in
   place, the pool's term and lead time, and what the cheaper tiers can absorb: spot (``spot_share`` of demand,
   within the pool's spot capacity) and the secondary provider (within its capacity), priced from the catalog;
3. act on the LP's commitments for the coming ``act_within_h`` hours only (whole nodes, rounded down) and solve
   again at the next epoch with fresh measurements. Growth is reserved ahead (the LP sees it coming), and a
   commitment whose demand went away is simply not renewed when its term ends.

Every setting here was chosen on the default scenario's seeds 11-20 (docs/scenario.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpufleet.control.commitments import FloatArray
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.reservations import term_seconds
from gpufleet.ports import PriceCatalog, ProcurementContext, ReservationProposal
from gpufleet.procure.baseline import on_demand_usd_per_gpu_h

HOUR_S = 3600
WEEK_H = 7 * 24


@dataclass(frozen=True, slots=True)
class TierLimits:
    """What the pay-per-use tiers of one SKU-region can absorb (GPUs): contracted or observed capacity."""

    spot_capacity_gpus: float = 0.0
    secondary_capacity_gpus: float = 0.0


def _theil_sen_per_day(daily: FloatArray) -> float:
    y = np.log(np.maximum(daily, 0.0) + 1.0)
    i, j = np.triu_indices(len(y), k=1)
    return float(np.median((y[j] - y[i]) / (j - i)))


def trend_per_day(history_gpus: FloatArray, lo: float = -0.01, hi: float = 0.006) -> float:
    """Daily growth rate of the demand's daily medians, clipped to ``[lo, hi]``: the Theil-Sen slope of their log
    in each half of the window, and the smaller of the two when they agree in sign (else no trend). A step (a
    training run that started) is flat in both halves, so it is not mistaken for growth; steady growth is not."""
    days = len(history_gpus) // 24
    if days < 8:
        return 0.0
    med = np.median(np.asarray(history_gpus, dtype=np.float64)[-days * 24 :].reshape(days, 24), axis=1)
    a, b = _theil_sen_per_day(med[: days // 2]), _theil_sen_per_day(med[days // 2 :])
    if a * b <= 0:
        return 0.0
    slope = a if abs(a) < abs(b) else b
    return min(max(math.expm1(slope), lo), hi)


def project(history_gpus: FloatArray, horizon_h: int, lookback_h: int, max_growth: float) -> FloatArray:
    """The next ``horizon_h`` hours: the last whole weeks of history, detrended to today, tiled, grown."""
    h = np.asarray(history_gpus, dtype=np.float64)
    h = np.where(np.isfinite(h), h, 0.0)
    weeks = max(1, min(len(h), lookback_h) // WEEK_H)
    window = h[-weeks * WEEK_H :]
    g = math.log1p(trend_per_day(h[-lookback_h:])) / 24  # per hour
    n = len(window)
    today = window * np.exp(-g * (np.arange(n) - (n - 1)))
    ahead = np.arange(horizon_h, dtype=np.float64) + 1
    return np.asarray(today[np.arange(horizon_h) % n] * np.minimum(np.exp(g * ahead), max_growth), dtype=np.float64)


def marginal_saving_usd(
    demand: FloatArray,
    levels: FloatArray,
    *,
    spot_gpus: FloatArray,
    secondary_gpus: float,
    reserved: float,
    spot: float,
    secondary: float,
    on_demand: float,
) -> FloatArray:
    """Saving per hour of the next reserved GPU at each capacity level (rows) in each hour (columns).

    The overflow above the reserved level is bought cheapest tier first (spot up to ``spot_gpus``, then the
    secondary provider, then on demand, with prices sorted), so one more reserved GPU replaces the dearest
    overflow GPU of the hour; its saving is that tier's price, and 0 when demand is below the level.
    """
    over = demand[None, :] - levels[:, None]
    tiers = sorted([(spot, spot_gpus), (secondary, np.full(len(demand), secondary_gpus))], key=lambda x: x[0])
    edge1 = tiers[0][1][None, :]
    edge2 = edge1 + tiers[1][1][None, :]
    price = np.where(over > edge2, on_demand, np.where(over > edge1, tiers[1][0], tiers[0][0]))
    return np.asarray(np.where(over > 0, np.minimum(price, on_demand), 0.0) - reserved, dtype=np.float64)


def worthwhile_nodes(
    cover: FloatArray,
    levels: FloatArray,
    first_window_h: int,
    *,
    spot_gpus: FloatArray,
    secondary_gpus: float,
    reserved: float,
    spot: float,
    secondary: float,
    on_demand: float,
) -> int:
    """How many of the candidate nodes (``levels``: the middle GPU of each, ascending) are worth committing now.

    A node is worth committing if it saves over its term and already saves in its first ``first_window_h`` hours:
    buying it a week later instead moves a week of cover from the start of the term to past its end, where the
    grown demand uses it at least as much (a node needed only later is bought at a later epoch). An hour's saving
    never grows with the level (the overflow it replaces only gets cheaper), so "worth it" holds for a prefix of
    the levels, and the first level where it fails is found by bisection: the answer of testing every level, in
    log2 of the evaluations.
    """

    def worth(level: float) -> bool:
        save = marginal_saving_usd(
            cover,
            np.array([level]),
            spot_gpus=spot_gpus,
            secondary_gpus=secondary_gpus,
            reserved=reserved,
            spot=spot,
            secondary=secondary,
            on_demand=on_demand,
        )[0]
        return bool(save.sum() > 0 and save[:first_window_h].sum() > 0)

    lo, hi = 0, len(levels)  # levels[:lo] are worth it, levels[hi:] are not
    while lo < hi:
        mid = (lo + hi) // 2
        if worth(float(levels[mid])):
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass(slots=True)
class ForecastLedProcurer:
    """Model-predictive commitments (see the module docstring); never proposes before ``min_history_h``."""

    limits: dict[str, TierLimits] = field(default_factory=dict)  # by SKU id; a missing SKU: no cheaper tiers
    prices: PriceCatalog = BUILTIN_PRICE_CATALOG
    min_history_h: int = 7 * 24
    lookback_h: int = 28 * 24
    spot_share: float = 0.3  # share of demand that may ride spot (checkpointable training)
    first_window_h: int = WEEK_H  # a node bought now must pay for itself over these first hours of its term
    max_growth: float = 1.3

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        hist = np.asarray(ctx.demand_history_gpus, dtype=np.float64)
        if int(np.isfinite(hist).sum()) < self.min_history_h:
            return []
        pool = ctx.pool
        # the term a new commitment runs for: the context's where it is not whole months (a replay's 1-week terms)
        term_h = ctx.term_h if ctx.term_h is not None else term_seconds(pool.term_months or 12) // HOUR_S
        lead_h = pool.lead_time_s // HOUR_S
        horizon = lead_h + term_h
        demand = project(hist, horizon, self.lookback_h, self.max_growth)
        lim = self.limits.get(ctx.sku_id, TierLimits())
        price = self.prices.list_price(ctx.sku_id)
        reserved = float(pool.price_usd_per_gpu_h)
        on_demand = on_demand_usd_per_gpu_h(self.prices, ctx.sku_id, reserved)
        cover = demand[lead_h : lead_h + term_h]  # the hours a commitment made now would cover
        have = float(ctx.committed_gpus_at_lead)
        per = ctx.gpus_per_node
        top = max(0, math.ceil((float(cover.max()) - have) / per))
        levels = have + per * np.arange(top, dtype=np.float64) + per / 2  # the middle GPU of each candidate node
        nodes = worthwhile_nodes(
            cover,
            levels,
            self.first_window_h,
            spot_gpus=np.minimum(self.spot_share * cover, lim.spot_capacity_gpus),
            secondary_gpus=lim.secondary_capacity_gpus,
            reserved=reserved,
            spot=float(price.spot) if price is not None else on_demand,
            secondary=float(price.secondary) if price is not None else on_demand,
            on_demand=on_demand,
        )
        if nodes <= 0:
            return []
        growth = float(demand[lead_h : lead_h + term_h].mean() / max(float(np.mean(hist[-WEEK_H:])), 1e-9))
        return [
            ReservationProposal(
                sku_id=ctx.sku_id,
                pool_id=pool.id,
                units=nodes * ctx.gpus_per_node,
                start_s=ctx.now_s + pool.lead_time_s,
                term_months=pool.term_months or 12,
                reason=(
                    f"forecast_led: {nodes * per} GPUs above {ctx.committed_gpus_at_lead} committed save more than "
                    f"they cost over the term on the projected demand (term mean {growth:.2f}x last week's), "
                    f"after spot and the secondary provider take what they can"
                ),
            )
        ]
