"""Hours whose utilization is not yet fully ingested when a planning pass runs.

The pass plans from the hours up to midnight (``service/procurement.py``), and a telemetry pipeline delivers a
source's buckets some minutes after they end, so the last hours may be only partly in the store when the pass
runs: summed, they read low, and the procurer would read a fall in demand (its step-down hold, docs/procure.md
step 6, holds a day's buying on two low hours).

Each source's *watermark* is the end of its last bucket ingested for the SKU (read by
:func:`gpufleet.service.utilization_reads.watermarks_statement`). An hour is complete when every source
that reported for the SKU in the day before the pass has delivered past its end. Incomplete hours take the same hour
of the day before (a seasonal-naive fill), at most the last ``grace_h`` hours; hours before those are read as they
are, whatever the watermarks: an idle or removed cluster sends no records either, so silence is not lateness.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

HOUR_S = 3600

FloatArray = npt.NDArray[np.float64]


def hourly_gpus(rows: Sequence[Any], first_h: int, until_s: int) -> FloatArray:
    """``(hour, GPU-seconds)`` rows (:func:`gpufleet.service.utilization_reads.per_period`: a long bucket already
    spread over the hours it covers) as GPUs per hour from hour ``first_h`` up to ``until_s`` (0 without a row;
    hours outside that range are not read)."""
    hourly = np.zeros(until_s // HOUR_S - first_h)
    for h, gpu_s in rows:
        if 0 <= int(h) - first_h < hourly.size:
            hourly[int(h) - first_h] = float(gpu_s) / HOUR_S
    return hourly


def late_hours(watermarks_s: Iterable[int], today_s: int, grace_h: int) -> int:
    """How many of the last hours before ``today_s`` are not yet complete: from the hour holding the earliest
    watermark (a watermark on an hour's start leaves that hour out) up to ``today_s``, at most ``grace_h``."""
    marks = [min(int(w), today_s) for w in watermarks_s]
    if not marks or grace_h <= 0:
        return 0
    return int(min(today_s // HOUR_S - min(marks) // HOUR_S, grace_h))


def fill_late_hours(hourly: FloatArray, n_late: int) -> FloatArray:
    """``hourly`` with its last ``n_late`` hours replaced by the same hours of the day before. Unchanged (a copy)
    when ``n_late`` is 0 or the history holds fewer than 24 hours before them."""
    out = np.array(hourly, dtype=np.float64, copy=True)
    n = len(out)
    if n_late <= 0 or n - n_late < 24:
        return out
    out[n - n_late :] = out[n - n_late - 24 : n - 24]
    return out
