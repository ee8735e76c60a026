"""Statements over the utilization records that several services read: GPU-seconds per period, and each source's
watermark (the end of its last bucket ingested; service/late_hours.py). Built once, with bound parameters ``sku``,
``since_s`` and ``until_s`` (records whose bucket starts in ``[since_s, until_s)``), aggregated in the database."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Select, String, bindparam, case, func, select

from gpufleet.adapters.sql.models import UtilizationRow


def gpu_seconds_statement(period_s: int) -> Select[int, float, int, int]:
    """The SKU ``sku``'s GPU-seconds per period of ``period_s``, over the records whose bucket starts in
    ``[since_s, until_s)``: the hourly history the fill reads, and the daily one. Read the rows with
    :func:`per_period`. Records inside one period are summed in the database (one row ``(period, GPU-seconds, 0,
    0)`` per period); a record whose bucket runs past its period's end comes as ``(period, GPU-seconds, bucket
    start, bucket length)`` (summed with the others of the same start and length), for :func:`per_period` to spread
    over the periods it covers."""
    period = UtilizationRow.bucket_start_s // period_s
    within = UtilizationRow.bucket_start_s % period_s + UtilizationRow.bucket_s <= period_s
    start = case((within, 0), else_=UtilizationRow.bucket_start_s)
    length = case((within, 0), else_=UtilizationRow.bucket_s)
    return (
        select(period, func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s), start, length)
        .where(
            UtilizationRow.sku_id == bindparam("sku", type_=String()),
            UtilizationRow.bucket_start_s >= bindparam("since_s"),
            UtilizationRow.bucket_start_s < bindparam("until_s"),
        )
        .group_by(period, start, length)
    )


def per_period(rows: Iterable[Any], period_s: int, until_s: int) -> list[tuple[int, float]]:
    """The rows of :func:`gpu_seconds_statement` as ``(period index, GPU-seconds)``, one per period with a record,
    in period order: a bucket longer than its period (ingest takes buckets up to a day) spread over the periods it
    covers in proportion to its overlap with each, up to ``until_s`` (the part after it is not in the history)."""
    out: dict[int, float] = defaultdict(float)
    for p, gpu_s, start, length in rows:
        if not length:
            out[int(p)] += float(gpu_s)
            continue
        s0, s1 = int(start), min(int(start) + int(length), until_s)
        for q in range(s0 // period_s, -(-s1 // period_s)):
            part = min(s1, (q + 1) * period_s) - max(s0, q * period_s)
            if part > 0:
                out[q] += float(gpu_s) * part / int(length)
    return sorted(out.items())


def watermarks_statement() -> Select[str, int]:
    """Each source's last ingested instant (its last bucket's end) for the SKU ``sku``, over the records whose
    bucket starts in ``[since_s, until_s)``; one row ``(source, end_s)`` per source."""
    return (
        select(UtilizationRow.source, func.max(UtilizationRow.bucket_start_s + UtilizationRow.bucket_s))
        .where(
            UtilizationRow.sku_id == bindparam("sku", type_=String()),
            UtilizationRow.bucket_start_s >= bindparam("since_s"),
            UtilizationRow.bucket_start_s < bindparam("until_s"),
        )
        .group_by(UtilizationRow.source)
    )
