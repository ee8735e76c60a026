"""Point-forecast components of the serving ensemble: small, fast numpy methods on a gap-free series.

Each component maps ``(y, h)`` to ``h`` point forecasts. They are deliberately simple; the ensemble
(:mod:`gpufleet.forecast.serving`) weights them by their in-sample rolling-origin errors, so a component that
does not fit a series gets little weight there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gpufleet.forecast.quantiles import FloatArray

ComponentFn = Callable[[FloatArray, int], FloatArray]
SES_SMALL = 256  # series up to this long: SES levels by one weight-matrix product (longer: a linear filter each)


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


def _centered_ma(y: FloatArray, width: int) -> FloatArray:
    """Centered moving average (NaN where the window does not fit); even widths use the usual 2 x m average."""
    n = len(y)
    out = np.full(n, np.nan)
    if width < 2 or n < width + 1:
        return out
    c = np.concatenate(([0.0], np.cumsum(y)))
    if width % 2:
        half = width // 2
        out[half : n - half] = (c[width:] - c[:-width]) / width
    else:
        m = (c[width:] - c[:-width]) / width  # window [i, i + width)
        half = width // 2
        out[half : n - half] = 0.5 * (m[:-1] + m[1:])
    return out


def _phase_profile(detrended: FloatArray, season: int, n_cycles: int) -> FloatArray:
    """Mean of ``detrended`` by phase over the last ``n_cycles`` cycles (phase 0 = the step after the end)."""
    n = len(detrended)
    k = min(n_cycles, n // season)
    block = detrended[n - k * season :].reshape(k, season)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(block)
        prof = np.where(ok, block, 0.0).sum(axis=0) / np.maximum(ok.sum(axis=0), 1)
    return np.asarray(prof - prof.mean(), dtype=np.float64)


def _ses_level(
    y: FloatArray, lead: int = 1, alphas: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)
) -> float:
    """Final SES level with the alpha of least squared error ``lead`` steps ahead (so a long horizon does not pick
    the noise-chasing alpha a one-step criterion favours); grid search, one linear filter per alpha."""
    lead = max(1, min(lead, len(y) // 3))
    if len(y) < 2:
        return float(y[-1])
    if len(y) <= SES_SMALL:
        levels = _ses_levels_small(y, alphas)  # (alphas, n - 1)
    else:
        from scipy.signal import lfilter  # here, not at module level: only long series need it

        # level_t = (1 - a) level_{t-1} + a y_t, started at y_0; one linear filter per alpha
        levels = np.vstack([lfilter([a], [1.0, -(1.0 - a)], y[1:], zi=[(1.0 - a) * y[0]])[0] for a in alphas])
    prev = np.concatenate((np.full((len(alphas), 1), y[0]), levels), axis=1)  # prev[:, t] = level after y_t
    sse = np.sum((y[None, lead:] - prev[:, : len(y) - lead]) ** 2, axis=1)
    return float(levels[int(np.argmin(sse)), -1])


def _ses_levels_small(y: FloatArray, alphas: tuple[float, ...]) -> FloatArray:
    """SES levels after each of ``y[1:]`` for every alpha at once, as a lower-triangular weight matrix product."""
    m = len(y) - 1
    weights, start_pow = _ses_weights(alphas)
    # the leading block of the largest matrices holds the very values computed for this length (each entry is
    # ``alpha * (1 - alpha) ** (T - t)``, independent of m); copied to the layout the product was computed on
    w = np.ascontiguousarray(weights[:, :m, :m])
    return np.asarray(w @ y[1:] + start_pow[:, :m] * y[0], dtype=np.float64)


@lru_cache(maxsize=4)
def _ses_weights(alphas_t: tuple[float, ...], m: int = SES_SMALL - 1) -> tuple[FloatArray, FloatArray]:
    """The weight matrices of :func:`_ses_levels_small` for the longest series it takes (read-only):
    ``weights[a, T, t] = alpha (1 - alpha) ** (T - t)`` for ``T >= t`` (else 0) and ``(1 - alpha) ** (T + 1)``."""
    alphas = np.asarray(alphas_t)
    lag = np.subtract.outer(np.arange(m), np.arange(m))  # T - t
    low = lag >= 0
    decay = (1.0 - alphas)[:, None, None] ** np.where(low, lag, 0)[None]
    weights = np.where(low[None], alphas[:, None, None] * decay, 0.0)
    start_pow = (1.0 - alphas)[:, None] ** (np.arange(m) + 1)[None, :]
    weights.flags.writeable = False
    start_pow.flags.writeable = False
    return weights, start_pow


def decomposition(seasons: tuple[int, ...], n_cycles: int = 8) -> ComponentFn:
    """Multi-seasonal decomposition (an MSTL in miniature): for each season, shortest first, the phase profile of
    the series minus a centered moving average of that length (last ``n_cycles`` cycles); the deseasonalized series
    is forecast by SES (alpha by least squares) and the profiles are added back.
    """

    def fn(y: FloatArray, h: int) -> FloatArray:
        rest = np.asarray(y, dtype=np.float64)
        out = np.zeros(h)
        for s in seasons:
            if 2 * s > len(rest):
                continue
            prof = _phase_profile(rest - _centered_ma(rest, s), s, n_cycles)
            rest = rest - _tile(prof, s - len(rest) % s, len(rest))
            out += _tile(prof, 0, h)
        tail = rest[-min(len(rest), 20 * max(seasons or (1,))) :]
        return out + _ses_level(tail, h)

    return fn


def default_components(seasons: tuple[int, ...], menu: str = "lean") -> list[Component]:
    """The component menu for a series with the given season lengths (shortest first): one member per family
    (last level, last-season level, seasonal naive, level + seasonal shape, decompositions), so the weighting is
    not tilted toward a family that happens to have several near-copies."""
    base = seasons[0] if seasons else 1
    small = max(1, base // 12)
    comps = [
        Component("naive", 1, naive) if small == 1 else Component(f"recent_mean_{small}", small, recent_mean(small))
    ]
    if base > 1:
        comps.append(Component(f"recent_mean_{base}", base, recent_mean(base)))
    for s in seasons:
        if s < 2:
            continue
        comps.append(Component(f"seasonal_naive_{s}", s, seasonal_naive(s)))
        if menu == "full":
            comps += [
                Component(f"seasonal_mean_{s}x3", 3 * s, seasonal_mean(s, 3)),
                Component(f"level_profile_{s}x3", 3 * s, level_profile(s, 3, max(1, s // 12))),
            ]
        comps.append(Component(f"level_profile_{s}x7", 3 * s, level_profile(s, 7, max(1, s // 12))))
    usable = tuple(s for s in seasons if s >= 2)
    for j in range(1, len(usable) + 1):
        sub = usable[:j]
        comps.append(Component("decomp_" + "_".join(map(str, sub)), 2 * sub[-1], decomposition(sub)))
    return comps
