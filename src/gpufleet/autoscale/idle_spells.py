"""Rent or buy with a learned gap distribution: how long an idle node of one pool stays idle before work reuses it.

An idle spell starts when a launched node goes idle and ends when work lands on it again (an event) or when it
is terminated (censored: we only know it lasted at least that long). :class:`IdleSpells` keeps the recent
spells of one pool and estimates their survival ``S(t) = P(spell > t)`` with the Kaplan-Meier estimator, which
uses the censored spells correctly.

:func:`keep_idle_node` then applies the rent-or-buy rule to a node idle for ``a`` seconds: terminating now costs
``buy_s`` (a relaunch when work comes back, in seconds of the node's price); holding it until ``T`` and
terminating then costs ``E[min(G, T) - a | G > a] + buy_s x P(G > T | G > a)``. The node is kept if some ``T`` in
the data's range costs less than terminating now. With few spells it falls back to the deterministic ski-rental
threshold (keep while ``a < buy_s``), which is 2-competitive whatever the gaps.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class IdleSpells:
    """Recent idle spells of one pool: durations (s) and whether each ended in reuse (True) or was censored."""

    def __init__(self, window: int = 400, grid_s: float = 60.0) -> None:
        if window < 1 or grid_s <= 0:
            raise ValueError("window must be >= 1 and grid_s > 0")
        self.grid_s = grid_s
        self._d: deque[float] = deque(maxlen=window)
        self._e: deque[bool] = deque(maxlen=window)
        self._cache: tuple[FloatArray, FloatArray] | None = None

    def __len__(self) -> int:
        return len(self._d)

    @property
    def reuses(self) -> int:
        return sum(self._e)

    def add(self, duration_s: float, reused: bool) -> None:
        if duration_s < 0:
            raise ValueError("duration_s must be >= 0")
        self._d.append(float(duration_s))
        self._e.append(bool(reused))
        self._cache = None

    def survival(self) -> tuple[FloatArray, FloatArray]:
        """``(S, I)`` on the grid ``t_k = k x grid_s`` up to the longest spell: ``S[k] = P(G > t_k)`` (Kaplan-Meier),
        ``I[k]`` = integral of S from 0 to ``t_k``."""
        if self._cache is not None:
            return self._cache
        d = np.asarray(self._d, dtype=np.float64)
        e = np.asarray(self._e, dtype=bool)
        n_grid = int(np.ceil(d.max() / self.grid_s)) + 1 if len(d) else 1
        t = np.arange(n_grid, dtype=np.float64) * self.grid_s
        s = np.ones(n_grid)
        if e.any():
            times = np.unique(d[e])
            at_risk = (d[None, :] >= times[:, None]).sum(axis=1)
            deaths = (d[e][None, :] == times[:, None]).sum(axis=1)
            factors = np.cumprod(1.0 - deaths / at_risk)
            idx = np.searchsorted(times, t, side="right")  # events at or before t
            s = np.where(idx > 0, factors[np.maximum(idx - 1, 0)], 1.0)
        integral = np.concatenate(([0.0], np.cumsum((s[1:] + s[:-1]) * 0.5 * self.grid_s)))
        self._cache = (s, integral)
        return self._cache


def keep_idle_node(spells: IdleSpells, idle_s: float, buy_s: float, min_spells: int = 30) -> bool:
    """Rent-or-buy: keep a node idle for ``idle_s`` when holding it on has a lower expected cost than terminating."""
    if idle_s < 0 or buy_s < 0:
        raise ValueError("idle_s and buy_s must be >= 0")
    if len(spells) < min_spells:
        return idle_s < buy_s  # deterministic ski rental until the pool has data
    s, integral = spells.survival()
    k = int(idle_s // spells.grid_s)
    if k + 1 >= len(s) or s[k] <= 0.0:
        return False  # no spell in the data lasted this long: nothing says work will come back in time
    hold = (integral[k + 1 :] - integral[k]) / s[k] + buy_s * s[k + 1 :] / s[k]
    return bool(hold.min() < buy_s)
