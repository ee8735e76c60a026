"""When to ask a provider for more quota, and how much: a pure decision over a quota outlook.

``file_by_s`` is the exhaustion date minus the usual turnaround of an increase request (measured from the
provider's closed requests when there are some, else the configured lead time). The draft is due once
``now_s`` is within ``warn_s`` of that date (or past it). The desired value covers the forecast peak plus
``headroom`` (a fraction), in whole instances. Reason codes: ``not_exhausted`` (no draft needed),
``request_open`` (an open request already covers the need), ``later`` (not due yet), ``draft`` (due now),
``late`` (past ``file_by_s``: the increase may not arrive before exhaustion, ask anyway), ``declined`` (the
provider's last decision refused a request for at least as much: gpufleet does not ask again by itself, a person
does, with the provider's answer in hand; a larger need is drafted again).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.procure.quota import QuotaOutlook


@dataclass(frozen=True, slots=True)
class IncreaseDraft:
    pool_id: str
    current_gpus: float | None
    desired_gpus: int
    file_by_s: int | None
    turnaround_s: int
    due: bool
    reason: str


def draft_increase(
    outlook: QuotaOutlook,
    *,
    now_s: int,
    turnaround_s: int,
    gpus_per_instance: int,
    open_request_gpus: float | None = None,
    declined_request_gpus: float | None = None,
    headroom: float = 0.1,
    warn_s: int = 7 * 86400,
) -> IncreaseDraft:
    """The increase request to draft for one pool (``due`` says whether to draft it now). ``open_request_gpus``: what
    the open request asks; ``declined_request_gpus``: what the last decided request asked, when it was declined."""
    need = math.ceil(outlook.peak_forecast_gpus * (1.0 + headroom) / gpus_per_instance) * gpus_per_instance
    if outlook.exhausts_at_s is None or outlook.quota_gpus is None:
        return IncreaseDraft(outlook.pool_id, outlook.quota_gpus, need, None, turnaround_s, False, "not_exhausted")
    file_by = outlook.exhausts_at_s - turnaround_s
    if open_request_gpus is not None and open_request_gpus >= need:
        return IncreaseDraft(outlook.pool_id, outlook.quota_gpus, need, file_by, turnaround_s, False, "request_open")
    if open_request_gpus is None and declined_request_gpus is not None and declined_request_gpus >= need:
        return IncreaseDraft(outlook.pool_id, outlook.quota_gpus, need, file_by, turnaround_s, False, "declined")
    if now_s < file_by - warn_s:
        return IncreaseDraft(outlook.pool_id, outlook.quota_gpus, need, file_by, turnaround_s, False, "later")
    reason = "late" if now_s > file_by else "draft"
    return IncreaseDraft(outlook.pool_id, outlook.quota_gpus, need, file_by, turnaround_s, True, reason)


def usual_turnaround_s(closed_durations_s: list[int], default_s: int) -> int:
    """The median duration of past closed requests (created -> last update), or ``default_s`` without any."""
    done = sorted(d for d in closed_durations_s if d >= 0)
    if not done:
        return default_s
    mid = len(done) // 2
    return done[mid] if len(done) % 2 else (done[mid - 1] + done[mid]) // 2
