"""Quantile forecasts: the one output type of every forecaster in this package.

Invariant: ``values[i, k] <= values[i + 1, k]`` for every step ``k`` (quantiles never cross), enforced by
:func:`make_forecast`, which every model calls. Quantile levels are strictly increasing in ``(0, 1)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError

FloatArray = npt.NDArray[np.float64]

#: Levels scored by the benchmark (0.1..0.9) plus the tails procurement asks for.
DEFAULT_QUANTILES: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


@dataclass(frozen=True, slots=True)
class QuantileForecast:
    """``mean`` has shape ``(h,)``; ``values`` has shape ``(len(quantiles), h)``, sorted along axis 0."""

    mean: FloatArray
    quantiles: tuple[float, ...]
    values: FloatArray
    method: str

    @property
    def horizon(self) -> int:
        return int(self.mean.shape[0])

    def at(self, q: float) -> FloatArray:
        """The forecast of quantile ``q``; a level that was not requested is linearly interpolated."""
        qs = np.asarray(self.quantiles)
        hit = np.flatnonzero(np.isclose(qs, q))
        if hit.size:
            return np.asarray(self.values[hit[0]], dtype=np.float64)
        if not qs[0] <= q <= qs[-1]:
            raise ValidationError("quantile", f"{q} is outside the forecast levels {self.quantiles}")
        j = int(np.searchsorted(qs, q))
        w = (q - qs[j - 1]) / (qs[j] - qs[j - 1])
        return np.asarray((1 - w) * self.values[j - 1] + w * self.values[j], dtype=np.float64)


def check_quantiles(quantiles: Sequence[float]) -> tuple[float, ...]:
    """Validate quantile levels: strictly increasing, inside (0, 1)."""
    qs = tuple(float(q) for q in quantiles)
    if not qs:
        raise ValidationError("quantiles", "at least one quantile level is needed")
    if any(not 0.0 < q < 1.0 for q in qs):
        raise ValidationError("quantiles", f"levels must be in (0, 1), got {qs}")
    if any(b <= a for a, b in itertools.pairwise(qs)):
        raise ValidationError("quantiles", f"levels must be strictly increasing, got {qs}")
    return qs


def make_forecast(
    mean: FloatArray,
    values: FloatArray,
    quantiles: Sequence[float],
    method: str,
    *,
    floor: float | None = None,
) -> QuantileForecast:
    """Build a :class:`QuantileForecast`: replaces non-finite values, clips at ``floor``, sorts quantiles."""
    qs = check_quantiles(quantiles)
    m = np.asarray(mean, dtype=np.float64).copy()
    v = np.asarray(values, dtype=np.float64).reshape(len(qs), -1).copy()
    if v.shape[1] != m.shape[0]:
        raise ValidationError("values", f"shape {v.shape} does not match horizon {m.shape[0]}")
    fallback = float(np.nanmedian(m)) if np.isfinite(m).any() else 0.0
    m = np.where(np.isfinite(m), m, fallback)
    v = np.where(np.isfinite(v), v, m[None, :])
    if floor is not None:
        m = np.maximum(m, floor)
        v = np.maximum(v, floor)
    v.sort(axis=0)
    return QuantileForecast(mean=m, quantiles=qs, values=v, method=method)
