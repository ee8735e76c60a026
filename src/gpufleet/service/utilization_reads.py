"""Statements over the utilization records that several services read: GPU-seconds per period, and each source's
watermark (the end of its last bucket ingested; service/late_hours.py). Built once, with bound parameters ``sku``,
``since_s`` and ``until_s`` (records whose bucket starts in ``[since_s, until_s)``), aggregated in the database."""

from __future__ import annotations

from sqlalchemy import Select, String, bindparam, func, select

from gpufleet.adapters.sql.models import UtilizationRow


def gpu_seconds_statement(period_s: int) -> Select[int, float]:
    """The SKU ``sku``'s GPU-seconds per period of ``period_s`` (one row ``(period index, GPU-seconds)`` per period
    with a record; aggregated in the database), over the records whose bucket starts in ``[since_s, until_s)``:
    the hourly history the fill reads, and the daily one."""
    period = UtilizationRow.bucket_start_s // period_s
    return (
        select(period, func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s))
        .where(
            UtilizationRow.sku_id == bindparam("sku", type_=String()),
            UtilizationRow.bucket_start_s >= bindparam("since_s"),
            UtilizationRow.bucket_start_s < bindparam("until_s"),
        )
        .group_by(period)
    )


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
