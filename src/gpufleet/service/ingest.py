"""Bulk ingestion of utilization records, idempotent per (source, bucket start, workload).

Re-sending a record with the same key replaces it (last write wins), so a telemetry pipeline may retry a
whole batch after a timeout without double counting. A workload is billed to one team (:meth:`IngestService.
_check_owners`); batches naming the same workload are checked and written one after the other (SQLite: one writer
at a time; PostgreSQL: an advisory lock per workload id, held to commit).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from gpufleet.adapters.sql.models import PoolRow, SkuRow, UtilizationRow, WorkloadRow
from gpufleet.domain.errors import ValidationError
from gpufleet.service.auth import ADMINS, Actor
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

MAX_RECORDS = 10_000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
MAX_TIME_S = 253_402_300_799  # 9999-12-31T23:59:59Z
CSV_COLUMNS = (
    "source",
    "bucket_start_s",
    "bucket_s",
    "workload_id",
    "team_id",
    "sku_id",
    "gpus_allocated",
    "gpu_util",
    "queue_wait_s",
    "pool_id",
    "gpu_mem_gb",
)
_REQUIRED = CSV_COLUMNS[:-3]  # queue_wait_s, pool_id and gpu_mem_gb are optional
_POOL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}")


@dataclass(frozen=True, slots=True)
class IngestResult:
    received: int
    inserted: int
    updated: int


def parse_csv(text: str) -> list[dict[str, Any]]:
    """CSV with a header naming at least the required columns; values are converted and range-checked. CSV the
    csv module cannot read (e.g. a cell over its 128 KiB field limit) is a ValidationError naming the line."""
    reader = csv.DictReader(io.StringIO(text))
    out: list[dict[str, Any]] = []
    try:
        missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise ValidationError("body", f"CSV header lacks column(s): {', '.join(missing)}", location="line 1")
        for i, raw in enumerate(reader):
            out.append(_csv_record(i, raw))
    except csv.Error as exc:
        field = f"records[{len(out)}]" if reader.line_num > 1 else "body"
        raise ValidationError(field, f"unreadable CSV: {exc}", location=f"line {reader.line_num}") from None
    return out


def _csv_record(i: int, raw: dict[str, Any]) -> dict[str, Any]:
    try:
        return {
            "source": raw["source"],
            "workload_id": raw["workload_id"],
            "team_id": raw["team_id"],
            "sku_id": raw["sku_id"],
            "bucket_start_s": int(raw["bucket_start_s"]),
            "bucket_s": int(raw["bucket_s"]),
            "gpus_allocated": float(raw["gpus_allocated"]),
            "gpu_util": float(raw["gpu_util"]) if raw["gpu_util"] not in ("", None) else None,
            "queue_wait_s": float(raw["queue_wait_s"]) if raw.get("queue_wait_s") else None,
            "pool_id": raw.get("pool_id") or None,
            "gpu_mem_gb": float(raw["gpu_mem_gb"]) if raw.get("gpu_mem_gb") not in ("", None) else None,
        }
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"records[{i}]", f"bad value: {exc}", location=f"line {i + 2}") from None


def validate(records: Sequence[dict[str, Any]]) -> None:
    """The same rules as the JSON schema, for records that arrive as CSV."""
    if len(records) > MAX_RECORDS:
        raise ValidationError("records", f"at most {MAX_RECORDS} records per request, got {len(records)}")
    for i, r in enumerate(records):
        for key in ("source", "workload_id", "team_id", "sku_id"):
            if not isinstance(r[key], str) or _ID.fullmatch(r[key]) is None:
                raise ValidationError(f"records[{i}].{key}", "must be 1..64 of letters, digits and _ . : -")
        if r["bucket_s"] <= 0 or r["bucket_s"] > 86400:
            raise ValidationError(f"records[{i}].bucket_s", "must be in 1..86400")
        if not 0 <= r["bucket_start_s"] <= MAX_TIME_S:
            raise ValidationError(f"records[{i}].bucket_start_s", "must be a UNIX time in 0..year 9999")
        if r["gpus_allocated"] > 1e6:
            raise ValidationError(f"records[{i}].gpus_allocated", "must be <= 1e6")
        if not math.isfinite(r["gpus_allocated"]) or r["gpus_allocated"] < 0:
            raise ValidationError(f"records[{i}].gpus_allocated", "must be a finite number >= 0")
        u = r["gpu_util"]
        if u is not None and (not math.isfinite(u) or not 0.0 <= u <= 1.0):
            raise ValidationError(f"records[{i}].gpu_util", "must be in [0, 1], or empty (not measured)")
        pool = r.get("pool_id")
        if pool is not None and (not isinstance(pool, str) or _POOL_ID.fullmatch(pool) is None):
            raise ValidationError(f"records[{i}].pool_id", "must be a pool id like aws/us-east-1/h100_80gb/reserved")
        q = r.get("queue_wait_s")
        if q is not None and (not math.isfinite(q) or q < 0):
            raise ValidationError(f"records[{i}].queue_wait_s", "must be a finite number >= 0")
        m = r.get("gpu_mem_gb")
        if m is not None and (not math.isfinite(m) or not 0 <= m <= 1e6):
            raise ValidationError(f"records[{i}].gpu_mem_gb", "must be in [0, 1e6] GB, or empty (not measured)")


class IngestService:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    @staticmethod
    def _check_owners(uow: UnitOfWork, records: Sequence[dict[str, Any]]) -> None:
        """A workload is billed to one team: its registered team, else the team its earlier records name, else
        the first record of the batch that names it. A record naming another team is refused, naming the line."""
        owner: dict[str, str] = {}
        ids = sorted({r["workload_id"] for r in records})
        s = uow.session
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for wid, team in s.execute(
                select(UtilizationRow.workload_id, UtilizationRow.team_id)
                .where(UtilizationRow.workload_id.in_(chunk))
                .distinct()
            ).all():
                owner.setdefault(wid, team)
            for wid, team in s.execute(select(WorkloadRow.id, WorkloadRow.team_id).where(WorkloadRow.id.in_(chunk))):
                owner[wid] = team  # the registry wins over history
        for i, r in enumerate(records):
            team = owner.setdefault(r["workload_id"], r["team_id"])
            if team != r["team_id"]:
                raise ValidationError(
                    f"records[{i}].team_id",
                    f"workload {r['workload_id']!r} belongs to team {team!r}, not {r['team_id']!r}: "
                    "one team's workload cannot be billed to another",
                )

    def ingest_leaving_out(self, actor: Actor, records: Sequence[dict[str, Any]]) -> tuple[int, list[str]]:
        """:meth:`ingest` in chunks of ``MAX_RECORDS``, for a machine source (the Kubernetes controller's usage
        meter): a record the store refuses (e.g. a workload registered to another team) is left out, with the
        reason, and the rest written. Returns (records written, refusals)."""
        todo = list(records)
        refused: list[str] = []
        written = 0
        while todo:
            chunk = todo[:MAX_RECORDS]
            try:
                self.ingest(actor, chunk)
            except ValidationError as exc:
                m = re.match(r"records\[(\d+)\]", exc.field)
                if m is None or int(m.group(1)) >= len(chunk):
                    raise
                bad = chunk[int(m.group(1))]
                refused.append(f"{bad['source']}/{bad['workload_id']}@{bad['bucket_start_s']}: {exc}")
                todo.remove(bad)
                continue
            written += len(chunk)
            todo = todo[MAX_RECORDS:]
        return written, refused

    def ingest(self, actor: Actor, records: Sequence[dict[str, Any]]) -> IngestResult:
        actor.require(*ADMINS)
        validate(records)
        latest: dict[tuple[str, int, str], dict[str, Any]] = {}
        for r in records:  # within a batch the last record for a key wins, as across batches
            latest[(r["source"], r["bucket_start_s"], r["workload_id"])] = {
                **r,
                "queue_wait_s": r.get("queue_wait_s"),
                "pool_id": r.get("pool_id"),
                "gpu_mem_gb": r.get("gpu_mem_gb"),
            }
        rows = list(latest.values())
        with UnitOfWork(self._engine, write=True) as uow:
            s = uow.session
            # PostgreSQL: concurrent batches naming a workload are checked and written one after the other (else
            # both find no owner and bill it to two teams), and a pool named here is not deleted before commit
            uow.serialize("utilization.workload", (r["workload_id"] for r in records))
            named = sorted({r["pool_id"] for r in records if r.get("pool_id") is not None})
            for start in range(0, len(named), 500):
                s.execute(
                    uow.lock(select(PoolRow.id).where(PoolRow.id.in_(named[start : start + 500])), key_share=True)
                )
            known = set(s.scalars(select(SkuRow.id)).all())
            pool_sku: dict[str, str] = {p: k for p, k in s.execute(select(PoolRow.id, PoolRow.sku_id)).all()}
            for i, r in enumerate(records):
                if r["sku_id"] not in known:
                    raise ValidationError(f"records[{i}].sku_id", f"unknown SKU {r['sku_id']!r}")
                pool = r.get("pool_id")
                if pool is not None and pool not in pool_sku:
                    raise ValidationError(f"records[{i}].pool_id", f"unknown pool {pool!r}")
                if pool is not None and pool_sku[pool] != r["sku_id"]:
                    raise ValidationError(
                        f"records[{i}].pool_id", f"pool {pool!r} holds {pool_sku[pool]}, not {r['sku_id']}"
                    )
            self._check_owners(uow, records)
            existing = 0
            for chunk_start in range(0, len(rows), 500):
                chunk = rows[chunk_start : chunk_start + 500]
                cond = or_(
                    *(
                        and_(
                            UtilizationRow.source == r["source"],
                            UtilizationRow.bucket_start_s == r["bucket_start_s"],
                            UtilizationRow.workload_id == r["workload_id"],
                        )
                        for r in chunk
                    )
                )
                existing += len(s.execute(select(UtilizationRow.source).where(cond)).all())
            if rows:
                ins = pg_insert if self._engine.dialect.name == "postgresql" else sqlite_insert
                for chunk_start in range(0, len(rows), 500):
                    stmt = ins(UtilizationRow).values(rows[chunk_start : chunk_start + 500])
                    stmt = stmt.on_conflict_do_update(
                        index_elements=["source", "bucket_start_s", "workload_id"],
                        set_={
                            c: stmt.excluded[c]
                            for c in (
                                "bucket_s",
                                "team_id",
                                "sku_id",
                                "gpus_allocated",
                                "gpu_util",
                                "queue_wait_s",
                                "pool_id",
                                "gpu_mem_gb",
                            )
                        },
                    )
                    s.execute(stmt)
            result = IngestResult(len(records), len(rows) - existing, existing)
            uow.audit(
                at_s=self._clock.now_s(),
                actor=actor.user_id,
                action="utilization.ingested",
                entity="utilization",
                entity_id=rows[0]["source"] if rows else "-",
                detail={"received": result.received, "inserted": result.inserted, "updated": result.updated},
            )
            uow.commit()
            return result
