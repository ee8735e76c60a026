"""The forecast-led rule's arithmetic: the projected demand path and the reserved nodes worth committing on it.

Pure functions of :class:`~gpufleet.control.procurement.ForecastLedProcurer` (steps 1 and 3 of its docstring):
:func:`project` tiles the weekly profile of the recent weeks forward, detrended and grown by
:func:`trend_per_day`; :func:`worthwhile_nodes` counts the whole nodes above a committed level that save more than
they cost, the overflow above each level bought from the cheapest pay-per-use tier first
(:func:`marginal_saving_usd`).
"""

from __future__ import annotations

import math

import numpy as np

from gpufleet.control.commitments import FloatArray

WEEK_H = 7 * 24


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


PROFILES = ("median", "recent", "oldest")


def project(
    history_gpus: FloatArray,
    horizon_h: int,
    lookback_h: int,
    max_growth: float,
    profile: str = "median",
    level_weight: float = 0.0,
) -> FloatArray:
    """The next ``horizon_h`` hours: the weekly profile of the last whole weeks of history (detrended to today),
    tiled hour-of-week aligned and grown. ``profile``: ``median`` = each hour of the week's median over those weeks
    (robust to one odd week, and as recent as the weeks allow), ``recent`` = the last week, ``oldest`` = the weeks
    in order from the oldest (before issue 15: a short term's cover saw four-week-old demand); then brought to the
    level of the last days (the median of the last three days' ratios to the profile's same hours) to the power
    ``level_weight`` (0 = not at all). Under a week of
    history the period is a day (hour-of-day aligned, over the whole days observed); under a day, the mean level."""
    h = np.asarray(history_gpus, dtype=np.float64)
    h = np.where(np.isfinite(h), h, 0.0)
    if len(h) == 0:
        return np.zeros(horizon_h)
    span = min(len(h), lookback_h)
    period = WEEK_H if span >= WEEK_H else 24 * min(span // 24, 1)
    g = math.log1p(trend_per_day(h[-lookback_h:])) / 24  # per hour
    ahead = np.arange(horizon_h, dtype=np.float64) + 1
    grow = np.minimum(np.exp(g * ahead), max_growth)
    if period == 0:
        return np.asarray(np.full(horizon_h, float(h[-24:].mean())) * grow, dtype=np.float64)
    k = span // period
    window = h[-k * period :]
    n = len(window)
    today = (window * np.exp(-g * (np.arange(n) - (n - 1)))).reshape(k, period)
    if profile == "oldest":
        flat = today.ravel()
        return np.asarray(flat[np.arange(horizon_h) % n] * grow, dtype=np.float64)
    base = today[-1] if profile == "recent" else np.median(today, axis=0)
    if level_weight > 0 and period >= 24:
        # brought to the last days' level: the median over the last (up to) three days of each day's mean over the
        # profile's same hours (one outage day does not set it), damped by level_weight
        days = min(3, period // 24)
        last = today[-1, period - 24 * days :].reshape(days, 24).mean(axis=1)
        ref = base[period - 24 * days :].reshape(days, 24).mean(axis=1)
        ratio = float(np.median(last / np.maximum(ref, 1e-9)))
        base = base * ratio**level_weight
    return np.asarray(base[np.arange(horizon_h) % period] * grow, dtype=np.float64)


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

    ``cover`` is the demand over the hours a commitment made now would cover: one path, or scenarios (rows, equally
    likely; ``spot_gpus`` of the same shape). A node is worth committing if it saves over its term and already
    saves in its first ``first_window_h`` hours (expected over the scenarios): buying it a week later instead moves
    a week of cover from the start of the term to past its end, where the grown demand uses it at least as much (a
    node needed only later is bought at a later epoch). An hour's saving never grows with the level (the overflow
    it replaces only gets cheaper), so "worth it" holds for a prefix of the levels, and the first level where it
    fails is found by bisection: the answer of testing every level, in log2 of the evaluations.
    """
    c = np.atleast_2d(np.asarray(cover, dtype=np.float64))
    first = (np.arange(c.shape[1]) < first_window_h)[None, :].repeat(c.shape[0], axis=0).ravel()
    flat, spot_flat = c.ravel(), np.broadcast_to(spot_gpus, c.shape).ravel()

    def worth(level: float) -> bool:
        save = marginal_saving_usd(
            flat,
            np.array([level]),
            spot_gpus=spot_flat,
            secondary_gpus=secondary_gpus,
            reserved=reserved,
            spot=spot,
            secondary=secondary,
            on_demand=on_demand,
        )[0]
        return bool(save.sum() > 0 and save[first].sum() > 0)

    lo, hi = 0, len(levels)  # levels[:lo] are worth it, levels[hi:] are not
    while lo < hi:
        mid = (lo + hi) // 2
        if worth(float(levels[mid])):
            lo = mid + 1
        else:
            hi = mid
    return lo
