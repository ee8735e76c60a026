"""Quota outlook: when forecast demand exhausts a pool's quota, and by when to ask for more.

Pure function of a forecast on a regular grid. ``exhausts_at_s`` is the start of the first period whose
forecast exceeds the quota; ``request_by_s`` is that moment minus the provider's lead time for a quota
increase. Reason codes: ``no_quota`` (unbounded), ``not_exhausted`` (within the forecast), ``on_track``
(request date still ahead), ``request_now`` (request date within ``warn_s`` of now), ``overdue``
(request date passed: the increase cannot arrive in time), ``exhausted`` (already over quota now).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class QuotaOutlook:
    pool_id: str
    quota_gpus: float | None
    peak_forecast_gpus: float
    headroom_gpus_now: float | None
    exhausts_at_s: int | None
    request_by_s: int | None
    reason: str


def quota_outlook(
    pool_id: str,
    forecast_gpus: npt.ArrayLike,
    *,
    start_s: int,
    period_s: int,
    quota_gpus: float | None,
    increase_lead_time_s: int,
    now_s: int,
    warn_s: int = 7 * 86400,
) -> QuotaOutlook:
    """Outlook for one provider/region/SKU pool from a forecast starting at ``start_s``."""
    f = np.asarray(forecast_gpus, dtype=np.float64)
    if f.ndim != 1 or len(f) == 0:
        raise ValidationError("forecast_gpus", "must be a non-empty 1-D series")
    if period_s <= 0:
        raise ValidationError("period_s", f"must be > 0, got {period_s}")
    if increase_lead_time_s < 0:
        raise ValidationError("increase_lead_time_s", "must be >= 0")
    peak = float(f.max())
    if quota_gpus is None:
        return QuotaOutlook(pool_id, None, peak, None, None, None, "no_quota")
    now_idx = max(min((now_s - start_s) // period_s, len(f) - 1), 0)
    headroom = float(quota_gpus - f[now_idx])
    over = np.nonzero(f > quota_gpus)[0]
    if len(over) == 0:
        return QuotaOutlook(pool_id, quota_gpus, peak, headroom, None, None, "not_exhausted")
    exhaust = int(start_s + int(over[0]) * period_s)
    request_by = exhaust - increase_lead_time_s
    if exhaust <= now_s:
        reason = "exhausted"
    elif request_by < now_s:
        reason = "overdue"
    elif request_by <= now_s + warn_s:
        reason = "request_now"
    else:
        reason = "on_track"
    return QuotaOutlook(pool_id, quota_gpus, peak, headroom, exhaust, request_by, reason)
