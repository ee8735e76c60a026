"""Capacity and allocation tables from CSV, for offline chargeback (``gpufleet cost chargeback``).

capacity.csv:    id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h[,owner_team_id]
allocations.csv: id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end[,shared,serving,pod]

Times are ISO-8601 with an offset (or ``Z``) or UNIX seconds. ``gpus`` in allocations may be a fraction such as
``0.5`` or a MIG share such as ``1/7`` (it must be a whole number of the 840 parts of a GPU). ``pod`` (default: the
workload id) is how telemetry samples are matched to the allocation, with ``namespace`` and the sample's time (a pod
that ran twice has two allocations). Allocation ids are unique. Errors name file, line and field.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import TypeVar

from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.telemetry_files import parse_time
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.pools import Tier

T = TypeVar("T")
MAX_GPUS = 2**31 - 1  # per row; more is a typo, and the exact ledger multiplies GPUs by seconds by price
MAX_PRICE_USD = Decimal(1_000_000)  # per GPU-hour
CAPACITY_COLUMNS = ("id", "pool_id", "tier", "sku_id", "gpus", "start", "end", "price_usd_per_gpu_h")
ALLOCATION_COLUMNS = ("id", "workload_id", "team_id", "tenant_id", "namespace", "feature", "pool_id", "sku_id",
                      "gpus", "start", "end")  # fmt: skip


def parse_parts(raw: str, where: str) -> int:
    """``"2"``, ``"0.5"`` or ``"1/7"`` GPUs to parts (840 per GPU)."""
    try:
        share = Fraction(raw.strip())
    except (ValueError, ZeroDivisionError):
        raise ValidationError("gpus", f"not a number or fraction: {raw!r}", where) from None
    parts = share * PARTS_PER_GPU
    if parts.denominator != 1 or parts <= 0:
        raise ValidationError("gpus", f"{raw!r} is not a positive whole number of 1/{PARTS_PER_GPU} GPU", where)
    if share > MAX_GPUS:
        raise ValidationError("gpus", f"at most {MAX_GPUS:,} GPUs, got {raw!r}", where)
    return int(parts)


def _read(path: Path, need: tuple[str, ...], row_fn: Callable[[dict[str, str], str], T]) -> list[T]:
    with io.StringIO(read_input_text(path), newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        for c in need:
            if c not in header:
                raise ValidationError(c, f"missing column (header is {header})", f"{path}:1")
        out: list[T] = []
        for raw in reader:
            row = {k.strip(): (v or "").strip() for k, v in raw.items() if k}
            where = f"{path}:{reader.line_num}"  # the line the row ends on (blank lines are skipped, not counted)
            for c in need:
                if not row.get(c):
                    raise ValidationError(c, "missing value", where)
            try:
                out.append(row_fn(row, where))
            except ValidationError as exc:
                raise ValidationError(exc.field, exc.message, exc.location or where) from None
    return out


def _int(row: dict[str, str], key: str, where: str, most: int) -> int:
    try:
        n = int(row[key])
    except ValueError:
        raise ValidationError(key, f"not an integer: {row[key]!r}", where) from None
    if n > most:
        raise ValidationError(key, f"at most {most:,}, got {row[key]!r}", where)
    return n


def read_capacity_csv(path: str | Path) -> list[CapacityBlock]:
    def row_fn(r: dict[str, str], where: str) -> CapacityBlock:
        try:
            tier = Tier(r["tier"])
        except ValueError:
            raise ValidationError("tier", f"one of {[t.value for t in Tier]}, got {r['tier']!r}", where) from None
        raw_price = r["price_usd_per_gpu_h"]
        try:
            usd = Decimal(raw_price)
        except ArithmeticError:
            raise ValidationError("price_usd_per_gpu_h", f"not a number: {raw_price!r}", where) from None
        if not usd.is_finite() or not 0 <= usd <= MAX_PRICE_USD:  # before price_to_uusd: -1e30 would not quantize
            raise ValidationError(
                "price_usd_per_gpu_h", f"a finite price in 0..{MAX_PRICE_USD}, got {raw_price!r}", where
            )
        price = price_to_uusd(usd)
        start_s, end_s = parse_time(r["start"], where), parse_time(r["end"], where)
        gpus = _int(r, "gpus", where, MAX_GPUS)
        return CapacityBlock(
            r["id"], r["pool_id"], tier, r["sku_id"], gpus, start_s, end_s, price, r.get("owner_team_id") or None
        )

    return _read(Path(path), CAPACITY_COLUMNS, row_fn)


def read_allocations_csv(path: str | Path) -> tuple[list[AllocationSpan], dict[tuple[str, str], list[int]]]:
    """The allocations, and ``(namespace, pod) -> indexes`` (in file order) for attributing telemetry: a pod that
    ran more than once has one allocation per run, and a sample goes to the one whose span holds its time.

    An id given twice is refused (it would be charged twice), naming the file and both lines."""

    def flag(r: dict[str, str], key: str) -> bool:
        return r.get(key, "").lower() in ("1", "true", "yes")

    def row_fn(r: dict[str, str], where: str) -> tuple[AllocationSpan, str, str]:
        span = AllocationSpan(
            r["id"], r["workload_id"], r["team_id"], r["tenant_id"], r["namespace"], r["feature"], r["pool_id"],
            r["sku_id"], parse_parts(r["gpus"], where), parse_time(r["start"], where), parse_time(r["end"], where),
            shared=flag(r, "shared"), serving=flag(r, "serving"),
        )  # fmt: skip
        return span, r.get("pod") or r["workload_id"], where

    rows = _read(Path(path), ALLOCATION_COLUMNS, row_fn)
    first: dict[str, str] = {}
    by_pod: dict[tuple[str, str], list[int]] = {}
    for j, (s, pod, where) in enumerate(rows):
        if first.setdefault(s.id, where) != where:
            raise ValidationError("id", f"{s.id!r} was already the id at {first[s.id]}", where)
        by_pod.setdefault((s.namespace, pod), []).append(j)
    return [s for s, _, _ in rows], by_pod
