"""The fresh-days projection and its buy rule: one of the two forecast rules of gpufleet's procurer.

:class:`FreshDaysRule` (a ``ReservationPolicy``; the replay policy deleted in session 8 as
``GpufleetReservationPolicy``, recovered for issues 15 and 21): for the hours a commitment made now would cover, demand
scenarios are the same hour of day on the ``days`` freshest days already observed for that hour, scaled by the square
root of the last day's mean over the lag window's mean (a damped trend); hours with no observed lag take the last
day's mean. Each scenario is also taken at downside levels today's level may be at given the days observed
(:func:`level_spread`, the hedge the procurer's weekly-profile rule uses too). A new GPU sits above the capacity committed at the first covered hour and is bought while its expected
saving over the term (the overflow tier it displaces) reaches the reserved price *and* the first covered hour needs
it (expected saving at that hour at least ``first_hour_use`` x on-demand): later hours are topped up later.

The procurer (:class:`gpufleet.control.procurement.ForecastLedProcurer`) runs it beside its weekly-profile rule in
its shadow book (:mod:`gpufleet.procure.hedge`) and follows whichever of the two has cost less on the observed
demand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.procure.policies import units_worth_committing
from gpufleet.procure.replay import ReplayConfig, overflow_tiers

FloatArray = npt.NDArray[np.float64]

FRESH_RULE = "fresh_days"
#: the normal's 10 and 30 % quantiles and three times its median: downside levels only (a commitment can be topped
#: up later, not undone)
_LEVEL_Z = np.array([-1.2816, -0.5244, 0.0, 0.0, 0.0])


def units_worth_committing_tiered(
    excess: FloatArray, demand: FloatArray, cfg: ReplayConfig, *, threshold_usd: float | None = None
) -> int:
    """Largest ``k`` such that the ``k``-th extra GPU's expected saving is at least ``threshold_usd`` (default: the
    reserved price) per hour. Overflow fills the pay-per-use tiers cheapest first, so one more reserved GPU removes
    the top unit of overflow: at overflow position ``y`` it saves the price of the tier holding position ``y``. With
    on-demand as the only overflow tier this is :func:`units_worth_committing` at ``threshold / on-demand``."""
    need_usd = cfg.reserved_usd_per_gpu_h if threshold_usd is None else threshold_usd
    e = np.asarray(excess, dtype=np.float64).ravel()
    d = np.asarray(demand, dtype=np.float64).ravel()
    if e.size == 0:
        return 0
    tiers = overflow_tiers(cfg, d)
    open_tiers = [(price, cap) for _, price, cap in tiers[:-1] if cap.max(initial=0.0) > 0]
    if len(open_tiers) == 1 and bool(np.all(np.isinf(open_tiers[0][1]))):
        return units_worth_committing(e, need_usd / open_tiers[0][0])
    bounds = np.cumsum(np.vstack([cap for _, _, cap in tiers]), axis=0)  # (n_tiers, cells)
    prices = np.array([price for _, price, _ in tiers])
    lo, hi = 0, max(math.ceil(float(e.max())), 0)
    while lo < hi:
        k = (lo + hi + 1) // 2
        y = e - (k - 1)  # overflow position of the k-th GPU's unit in each scenario-hour
        tier_idx = np.minimum((bounds < y[None, :] - 1e-9).sum(axis=0), len(prices) - 1)
        if float((np.clip(y, 0.0, 1.0) * prices[tier_idx]).mean()) >= need_usd - 1e-12:
            lo = k
        else:
            hi = k - 1
    return lo


def level_spread(history_gpus: FloatArray, sigma0: float, prior_days: float, max_days: int = 28) -> float:
    """The log-sd of today's demand level as the last days pin it: ``sigma / sqrt(days observed)``, ``sigma`` the
    day-to-day log change of the daily mean (1.4826 x its median absolute value, so one odd day does not inflate
    it) shrunk to the prior ``sigma0`` with ``prior_days`` pseudo-observations. Widest at the cold start; it fades as
    days accumulate. Both forecast rules of the procurer hedge their level by it."""
    h = np.asarray(history_gpus, dtype=np.float64)
    n_days = min(len(h) // 24, max_days)
    changes = np.zeros(0)
    if n_days >= 2:
        daily = h[len(h) - 24 * n_days :].reshape(n_days, 24).mean(axis=1)
        changes = np.diff(np.log(np.maximum(daily, 1e-9)))
    est2 = (1.4826 * float(np.median(np.abs(changes)))) ** 2 if len(changes) else 0.0
    sigma2 = (prior_days * sigma0**2 + len(changes) * est2) / (prior_days + len(changes))
    return math.sqrt(sigma2 / max(n_days, 1))


@dataclass(slots=True)
class FreshDaysRule:
    """The fresh-days forecast rule (module docstring); ``decide`` is the replay's ``ReservationPolicy`` call."""

    name: str = FRESH_RULE
    days: int = 5  # daily lags used as scenarios
    min_history_h: int = 1
    first_hour_use: float = 0.5  # the first covered hour's expected saving must reach this share of on-demand
    trend_weight: float = 0.5  # scenarios scaled by (last day / lag window mean) ** trend_weight
    level_sigma0: float = 0.3  # prior sd of the day-to-day log change of the daily level (0 = no level hedge)
    level_prior_days: float = 3.0
    max_cover_h: int = 90 * 24  # hours ahead scored (a longer term's tail looks the same); bounds the work

    def scenarios(self, t: int, history: FloatArray, cfg: ReplayConfig) -> FloatArray:
        """``(n_scenarios, hours)`` demand scenarios for the hours ``t + lead ..`` a commitment made now covers."""
        h = np.asarray(history[:t], dtype=np.float64)
        offsets = cfg.lead_h + np.arange(min(cfg.term_h, self.max_cover_h))
        first_lag = (offsets // 24) + 1  # the freshest day already observed at every hour ahead
        rows: list[FloatArray] = []
        for m in range(self.days):
            src = t + offsets - 24 * (first_lag + m)
            ok = src >= 0
            if not np.any(ok):
                break
            rows.append(np.where(ok, h[np.clip(src, 0, t - 1)], np.nan))
        if self.trend_weight > 0 and t >= 48:
            span = min(t, 24 * self.days)
            ratio = float(np.mean(h[-24:])) / max(float(np.mean(h[-span:])), 1e-9)
            rows = [r * ratio**self.trend_weight for r in rows]
        level = float(np.mean(h[-24:]))
        scen = np.vstack(rows) if rows else np.full((1, len(offsets)), level)
        scen = np.where(np.isnan(scen), level, scen)
        if self.level_sigma0 > 0:
            s = level_spread(h, self.level_sigma0, self.level_prior_days)
            scen = (scen[None, :, :] * np.exp(_LEVEL_Z * s)[:, None, None]).reshape(-1, scen.shape[1])
        return np.asarray(scen, dtype=np.float64)

    def gap(self, t: int, history: FloatArray, have: float, cfg: ReplayConfig) -> int:
        """GPUs worth committing above ``have`` (the capacity committed at the first covered hour)."""
        if t < self.min_history_h or t <= 0:
            return 0
        scen = self.scenarios(t, history, cfg)
        excess = scen - have
        worth = units_worth_committing_tiered(excess, scen, cfg)
        needed = units_worth_committing_tiered(
            excess[:, 0], scen[:, 0], cfg, threshold_usd=self.first_hour_use * cfg.on_demand_usd_per_gpu_h
        )
        return max(min(worth, needed), 0)

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        return float(self.gap(t, history, float(committed[cfg.lead_h]), cfg))
