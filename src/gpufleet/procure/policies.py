"""Online reservation policies for the hourly replay (see :mod:`gpufleet.procure.replay`).

* ``gpufleet``: break-even newsvendor on a forecast. For the hours a commitment made now would cover, it
  builds demand scenarios from the past (same hour on recent days, plus the most recent level), subtracts
  the capacity already committed for each hour, and commits the ``k``-th extra GPU only while its expected
  utilization is at least the break-even ``alpha = reserved / on-demand price``.
* ``all_on_demand``: never commits.
* ``reserve_peak``: keeps committed capacity at the peak of a 30-day lookback.
* ``lookback_p50``: keeps committed capacity at the median of a 30-day lookback (cloud recommenders' style).
* ``online_breakeven``: the deterministic online algorithm of Wang, Li and Liang ("To reserve or not to
  reserve", IEEE/ACM ToN 2015): commit a GPU at a demand level as soon as the on-demand spend at that level
  over the past term reaches the commitment's cost; competitive ratio 2 - alpha in their model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.procure.replay import ReplayConfig, overflow_tiers

FloatArray = npt.NDArray[np.float64]

LOOKBACK_30D_H = 30 * 24
_LEVEL_Z = np.array([-1.2816, -0.5244, 0.0, 0.5244, 1.2816])  # the normal's 10, 30, 50, 70, 90 % quantiles


def units_worth_committing(excess: FloatArray, alpha: float) -> int:
    """Largest ``k`` such that the ``k``-th extra GPU is used at least ``alpha`` of the time on average.

    ``excess`` holds demand minus already-committed capacity over scenario-hours; unit ``k`` (1-based)
    serves ``clip(excess - (k - 1), 0, 1)`` of an hour. Usage is non-increasing in ``k``: binary search.
    """
    e = np.asarray(excess, dtype=np.float64).ravel()
    if e.size == 0:
        return 0
    hi = max(math.ceil(float(e.max())), 0)
    lo = 0
    while lo < hi:
        k = (lo + hi + 1) // 2
        used = float(np.clip(e - (k - 1), 0.0, 1.0).mean())
        if used >= alpha - 1e-12:
            lo = k
        else:
            hi = k - 1
    return lo


def units_worth_committing_tiered(
    excess: FloatArray, demand: FloatArray, cfg: ReplayConfig, *, threshold_usd: float | None = None
) -> int:
    """Like :func:`units_worth_committing`, but a GPU saves what the overflow tier it displaces costs.

    Overflow fills the pay-per-use tiers cheapest first, so one more reserved GPU removes the top unit of
    overflow: at overflow position ``y`` it saves the price of the tier holding position ``y``. The ``k``-th
    GPU is worth it while its expected saving is at least ``threshold_usd`` (default: the reserved price).
    With on-demand as the only overflow tier this is exactly ``units_worth_committing(excess, alpha)``.
    """
    need_usd = cfg.reserved_usd_per_gpu_h if threshold_usd is None else threshold_usd
    tiers = overflow_tiers(cfg, demand)
    open_tiers = [(price, cap) for _, price, cap in tiers[:-1] if cap.max(initial=0.0) > 0]
    if len(open_tiers) == 1 and bool(np.all(np.isinf(open_tiers[0][1]))):
        return units_worth_committing(excess, need_usd / open_tiers[0][0])
    bounds = np.cumsum(np.vstack([cap for _, _, cap in tiers]), axis=0)  # (n_tiers, cells)
    prices = np.array([price for _, price, _ in tiers])
    e = np.asarray(excess, dtype=np.float64)
    if e.size == 0:
        return 0
    lo, hi = 0, max(math.ceil(float(e.max())), 0)
    while lo < hi:
        k = (lo + hi + 1) // 2
        y = e - (k - 1)  # overflow position of the k-th GPU's unit in each scenario-hour
        used = np.clip(y, 0.0, 1.0)
        tier_idx = np.minimum((bounds < y[None, :] - 1e-9).sum(axis=0), len(prices) - 1)
        saving = float((used * prices[tier_idx]).mean())
        if saving >= need_usd - 1e-12:
            lo = k
        else:
            hi = k - 1
    return lo


def _displaced_price(excess: FloatArray, demand: FloatArray, cfg: ReplayConfig, k: int) -> float:
    """Mean price of the overflow tier the ``k``-th extra GPU would displace, over cells where it is used."""
    tiers = overflow_tiers(cfg, demand)
    bounds = np.cumsum(np.vstack([cap for _, _, cap in tiers]), axis=0)
    prices = np.array([price for _, price, _ in tiers])
    y = np.asarray(excess, dtype=np.float64) - (k - 1)
    used = y > 0
    if not np.any(used):
        return cfg.on_demand_usd_per_gpu_h
    idx = np.minimum((bounds[:, used] < y[None, used] - 1e-9).sum(axis=0), len(prices) - 1)
    return float(prices[idx].mean())


@dataclass(slots=True)
class AllOnDemand:
    name: str = "all_on_demand"

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        return 0.0


@dataclass(slots=True)
class LookbackTarget:
    """Top committed capacity at activation up to a statistic of a lookback window."""

    name: str
    quantile: float  # 1.0 = peak, 0.5 = median
    lookback_h: int = LOOKBACK_30D_H

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        if t == 0:
            return 0.0
        target = float(np.quantile(history[-self.lookback_h :], self.quantile))
        return max(math.floor(target + 1e-9) - float(committed[cfg.lead_h]), 0.0)


def reserve_peak() -> LookbackTarget:
    return LookbackTarget("reserve_peak", 1.0)


def lookback_p50() -> LookbackTarget:
    return LookbackTarget("lookback_p50", 0.5)


@dataclass(slots=True)
class OnlineBreakeven:
    """Wang-Li-Liang deterministic algorithm, level by level, with the past term as its window.

    ``counted_`` is the capacity the algorithm considers to cover each hour: a commitment made at ``t``
    counts on ``[t - term, t + term)`` so the on-demand spend that triggered it is not counted twice
    (their algorithm marks those on-demand hours as accounted for).
    """

    name: str = "online_breakeven"
    counted_: FloatArray = field(default_factory=lambda: np.zeros(0))

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        h = cfg.term_h
        if len(self.counted_) < t + 2 * h + 1:
            grown = np.zeros(t + 4 * h + 1)
            grown[: len(self.counted_)] = self.counted_
            self.counted_ = grown
        if t == 0:
            return 0.0
        lo = max(t - h, 0)
        excess = history[lo:t] - self.counted_[lo:t]
        # a level is worth a commitment once its on-demand hours over one term reach alpha * term
        padded = np.concatenate([excess, np.zeros(h - len(excess))]) if len(excess) < h else excess
        r = units_worth_committing(padded, cfg.alpha)
        if r > 0:
            self.counted_[lo : t + h] += r
        return float(r)


@dataclass(slots=True)
class GpufleetReservationPolicy:
    """Forecast-driven break-even commitment (the default procurement policy of gpufleet).

    Scenarios for each hour ``u`` of the coming term: the demand at the same hour of day on each of the
    ``days`` most recent days that are already observed, scaled by the square root of the ratio of the last
    day's mean to the lag window's mean (a damped trend). A new GPU sits above the capacity already
    committed for the first covered hour; it is bought while its expected utilization is at least
    ``alpha`` and the first covered hour needs it. Renewals of expiring GPUs are immediate; growth is
    spread over ``ramp_h`` hours (hedging a level that one day of data cannot pin down). One set of
    defaults for every trace (see docs/procure.md for the sweep that chose them).
    """

    name: str = "gpufleet"
    days: int = 5  # daily lags used as scenarios
    recent_h: int = 0  # > 0 adds a flat scenario at the mean of the last recent_h hours
    min_history_h: int = 1
    first_hour_use: float = 0.5  # a new GPU must be used at the first covered hour in half the scenarios
    ramp_h: int = 1  # growth beyond renewals is committed over about this many hours
    trend_weight: float = 0.5  # scenarios scaled by (last day / lag window mean) ** trend_weight
    fill_unobserved: bool = True  # hours whose lag is not observed yet take the last day's mean level
    level_sigma0: float = 0.3  # prior sd of the day-to-day log change of the daily mean level
    level_prior_days: float = 3.0  # weight of that prior, in observed day-to-day changes
    level_drift: float = 0.0  # > 0: level variance also grows by this share of sigma^2 per day ahead
    level_upside: float = 0.0  # scale of the upper levels; 0 = downside only (see _level_uncertainty)

    def scenarios(self, t: int, history: FloatArray, cfg: ReplayConfig) -> FloatArray:
        """Matrix ``(n_scenarios, term_h)`` of demand scenarios for hours ``t + lead .. t + lead + term - 1``."""
        offsets = cfg.lead_h + np.arange(cfg.term_h)  # hours ahead of t
        rows: list[FloatArray] = []
        # the first daily lag that is already observed for every hour ahead is ceil((offset + 1) / 24) days,
        # so every hour ahead takes the same hour of day from the freshest observed days
        first_lag = (offsets // 24) + 1
        for m in range(self.days):
            src = t + offsets - 24 * (first_lag + m)
            ok = src >= 0
            if not np.any(ok):
                break
            row = np.where(ok, history[np.clip(src, 0, t - 1)], np.nan)
            rows.append(row)
        if self.trend_weight > 0 and t >= 48:
            span = min(t, 24 * self.days)
            ratio = float(np.mean(history[-24:])) / max(float(np.mean(history[-span:])), 1e-9)
            rows = [r * ratio**self.trend_weight for r in rows]
        level = float(np.mean(history[-max(self.recent_h, 24) :]))
        if self.recent_h > 0 or not rows:
            rows.append(np.full(cfg.term_h, level))
        scen = np.vstack(rows)
        if self.fill_unobserved:
            scen = np.where(np.isnan(scen), level, scen)
        if self.level_sigma0 > 0:
            scen = self._level_uncertainty(scen, history, cfg)
        return scen

    def _level_uncertainty(self, scen: FloatArray, history: FloatArray, cfg: ReplayConfig) -> FloatArray:
        """Each scenario at five levels ``exp(z * s_u)``, ``z`` the normal's 10-90 % deciles (odd).

        ``s_u^2 = sigma^2 * (1 / days observed + level_drift * days ahead of hour u)``: the daily level is
        estimated from few days (first term), so the hedge is widest at the cold start and fades as days
        accumulate. The second term (a random-walk drift over the horizon) is off by default: downside-only,
        it biased every long commitment low, so the policy under-bought a growing series in every row
        (docs/benchmarks/procure.md, "Why m-mid").
        ``sigma`` is the day-to-day log change of the daily mean, robustly estimated (1.4826 x median
        absolute change, so a one-day outage does not inflate it) and shrunk to the prior ``level_sigma0``
        with ``level_prior_days`` pseudo-observations. The break-even rule then hedges by itself: a wide
        spread lowers the expected use of the top units, most where the level is least known. Only the
        downside is spread by default (``level_upside = 0``: the upper levels stay at the centre): a
        commitment can be topped up later at the cost of a lead time of on-demand, but not undone, and a
        symmetric log spread made the policy over-buy wherever overflow is dear (quota exhausted).
        """
        n_days = min(len(history) // 24, 28)
        changes = np.zeros(0)
        if n_days >= 2:
            daily = history[len(history) - 24 * n_days :].reshape(n_days, 24).mean(axis=1)
            changes = np.diff(np.log(np.maximum(daily, 1e-9)))
        est2 = (1.4826 * float(np.median(np.abs(changes)))) ** 2 if len(changes) else 0.0
        k0 = self.level_prior_days
        sigma2 = (k0 * self.level_sigma0**2 + len(changes) * est2) / (k0 + len(changes))
        days_ahead = (cfg.lead_h + np.arange(cfg.term_h) + 1) / 24.0
        spread = np.sqrt(sigma2 * (1.0 / max(n_days, 1) + self.level_drift * days_ahead))
        z = np.where(_LEVEL_Z > 0, self.level_upside * _LEVEL_Z, _LEVEL_Z)
        factors = np.exp(z[:, None] * spread[None, :])  # (5, term_h)
        out: FloatArray = (scen[None, :, :] * factors[:, None, :]).reshape(-1, scen.shape[1])
        return out

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        if t < self.min_history_h:
            return 0.0
        scen = self.scenarios(t, history, cfg)
        # Past commitments all start before t + lead, so committed capacity only falls across the window
        # (expiries). Those expiring GPUs will be renewed by later decisions if still worth it, so a new
        # GPU is layered above the capacity at the first covered hour for the whole window; layering it
        # above the falling profile would credit it with demand that renewals will serve.
        have = float(committed[cfg.lead_h])
        excess = scen - have
        ok = np.isfinite(excess)
        worth = units_worth_committing_tiered(excess[ok], scen[ok], cfg)
        # commit only what the first covered hour needs: later hours can be topped up later, and buying
        # them now would double-cover hours that expiring commitments still cover
        # (in cost terms: the first hour's expected saving must reach first_hour_use x the on-demand price,
        # which with on-demand as the only overflow tier means "used in first_hour_use of the scenarios")
        first, first_ok = excess[:, 0], np.isfinite(excess[:, 0])
        needed = units_worth_committing_tiered(
            first[first_ok], scen[:, 0][first_ok], cfg, threshold_usd=self.first_hour_use * cfg.on_demand_usd_per_gpu_h
        )
        gap = min(worth, needed)
        if gap <= 0:
            return 0.0
        # renewing what expires at the first covered hour is immediate; growth beyond it is spread over
        # ``ramp_h`` hours, so that later hours decide on more information
        expiring = max(float(committed[cfg.lead_h - 1]) - have, 0.0) if cfg.lead_h > 0 else 0.0
        renew = min(float(gap), math.floor(expiring + 1e-9))
        growth = gap - renew
        if growth <= 0:
            return float(renew)
        # The ramp hedges over-commitment (cost: the reserved price) against under-commitment (cost: the
        # displaced tier's price minus the reserved price). Where the displaced tier is dearer than
        # on-demand (quota exhausted: secondary or priced unmet), shorten the ramp in proportion.
        price = _displaced_price(first[first_ok], scen[:, 0][first_ok], cfg, gap)
        under_usd = max(price - cfg.reserved_usd_per_gpu_h, 1e-9)
        od_under_usd = max(cfg.on_demand_usd_per_gpu_h - cfg.reserved_usd_per_gpu_h, 1e-9)
        ramp = max(1, round(self.ramp_h * min(1.0, od_under_usd / under_usd)))
        return float(renew + math.ceil(growth / ramp))


def baseline_policies() -> list[object]:
    return [AllOnDemand(), reserve_peak(), lookback_p50(), OnlineBreakeven()]
