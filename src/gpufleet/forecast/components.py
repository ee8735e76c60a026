"""Point-forecast components of the serving ensemble: small, fast numpy methods on a gap-free series.

Each component maps ``(y, h)`` to ``h`` point forecasts. They are deliberately simple; the ensemble
(:mod:`gpufleet.forecast.serving`) weights them by their in-sample rolling-origin errors, so a component that
does not fit a series gets little weight there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpufleet.forecast.quantiles import FloatArray

ComponentFn = Callable[[FloatArray, int], FloatArray]


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    min_history: int
    fn: ComponentFn


def _tile(profile: FloatArray, start_phase: int, h: int) -> FloatArray:
    idx = (start_phase + np.arange(h)) % len(profile)
    return np.asarray(profile[idx], dtype=np.float64)


def naive(y: FloatArray, h: int) -> FloatArray:
    return np.full(h, y[-1])


def recent_mean(width: int) -> ComponentFn:
    """The mean of the last ``width`` points: a level that ignores the noise of single readings."""

    def fn(y: FloatArray, h: int) -> FloatArray:
        return np.full(h, float(np.mean(y[-width:])))

    return fn


def seasonal_naive(season: int) -> ComponentFn:
    def fn(y: FloatArray, h: int) -> FloatArray:
        return _tile(y[-season:], 0, h)

    return fn


def seasonal_mean(season: int, n_seasons: int) -> ComponentFn:
    """Mean of the last ``n_seasons`` seasons at each phase (a smoothed seasonal naive)."""

    def fn(y: FloatArray, h: int) -> FloatArray:
        k = min(n_seasons, len(y) // season)
        block = y[len(y) - k * season :].reshape(k, season)
        return _tile(block.mean(axis=0), 0, h)

    return fn


def level_profile(season: int, n_seasons: int, level_width: int) -> ComponentFn:
    """Seasonal shape of the last ``n_seasons`` seasons (each centred on its mean) on top of the recent level.

    The level is the mean of the last ``level_width`` points minus the shape at those phases, so a series that
    shifted level keeps its daily shape at the new level.
    """

    def fn(y: FloatArray, h: int) -> FloatArray:
        k = min(n_seasons, len(y) // season)
        block = y[len(y) - k * season :].reshape(k, season)
        shape = (block - block.mean(axis=1, keepdims=True)).mean(axis=0)
        w = min(level_width, len(y))
        recent_shape = _tile(shape, season - w % season, w)
        level = float(np.mean(y[-w:] - recent_shape))
        return level + _tile(shape, 0, h)

    return fn


def drift_damped(width: int, phi: float) -> ComponentFn:
    """The recent level plus a damped trend estimated over the last ``width`` points."""

    def fn(y: FloatArray, h: int) -> FloatArray:
        w = min(width, len(y))
        seg = y[-w:]
        half = max(1, w // 2)
        slope = (float(np.mean(seg[half:])) - float(np.mean(seg[:half]))) / max(1, w - half)
        level = float(np.mean(seg[-max(1, w // 4) :]))
        steps = np.cumsum(phi ** np.arange(1, h + 1))
        return level + slope * (steps + w / 8)

    return fn


def default_components(seasons: tuple[int, ...]) -> list[Component]:
    """The component menu for a series with the given season lengths (shortest first)."""
    base = seasons[0] if seasons else 1
    small = max(1, base // 12)
    comps = [Component("naive", 1, naive)]
    for width in sorted({small, base} - {1}):
        comps.append(Component(f"recent_mean_{width}", width, recent_mean(width)))
    for s in seasons:
        if s < 2:
            continue
        comps += [
            Component(f"seasonal_naive_{s}", s, seasonal_naive(s)),
            Component(f"seasonal_mean_{s}x3", 3 * s, seasonal_mean(s, 3)),
            Component(f"level_profile_{s}x3", 3 * s, level_profile(s, 3, max(1, s // 12))),
            Component(f"level_profile_{s}x7", 7 * s, level_profile(s, 7, max(1, s // 12))),
        ]
    return comps
