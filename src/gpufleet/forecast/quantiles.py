"""Quantile forecasts: building and checking :class:`gpufleet.ports.DemandForecast`, the one output type.

Invariant: ``values[i, k] <= values[i + 1, k]`` for every step ``k`` (quantiles never cross), enforced by
:func:`make_forecast`, which every model calls. Quantile levels are strictly increasing in ``(0, 1)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.ports import DemandForecast

FloatArray = npt.NDArray[np.float64]

#: Levels scored by the benchmark (0.1..0.9) plus the tails procurement asks for.
DEFAULT_QUANTILES: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


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
) -> DemandForecast:
    """Build a :class:`DemandForecast`: replaces non-finite values, clips at ``floor``, sorts quantiles."""
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
    return DemandForecast(mean=m, levels=qs, values=v, method=method)
