"""The simple online reservation rules of the hourly replay (see :mod:`gpufleet.procure.replay`): the baselines
gpufleet's procurer is measured against, and the shadows it hedges with (:mod:`gpufleet.procure.hedge`).

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

from gpufleet.procure.replay import ReplayConfig

FloatArray = npt.NDArray[np.float64]

LOOKBACK_30D_H = 30 * 24


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


def baseline_policies() -> list[object]:
    return [AllOnDemand(), reserve_peak(), lookback_p50(), OnlineBreakeven()]
