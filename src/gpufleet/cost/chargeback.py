"""Chargeback and showback: cost lines grouped by a label, with GPU-hours held, used and measured (held with a
utilization reading: utilization is used over measured), as rows and CSV. Used never exceeds measured, nor measured
held: an allocation whose samples cover more GPU-seconds than it held has them scaled down to what it held.

Label cells of the CSV are neutralised against spreadsheet formula injection (:func:`csv_text_cell`).
Money stays in integer ledger units until it is shown. The TOTAL row is the fleet cost rounded to the cent; the
rows' cents are apportioned from it by largest remainder (:func:`~gpufleet.cost.allocate.apportion`), and each row's
direct, idle and shared cents from the row's, so the rows add up to the TOTAL row to the cent and each row's
columns to its total (a row may differ from its own units rounded alone by a cent; never the units).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.cost.allocate import CostAllocation, apportion
from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, LineKind
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import CENT, units_to_cents, units_to_usd

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_text_cell(value: str) -> str:
    """A text cell that a spreadsheet will not run as a formula (OWASP "CSV injection"): a value starting with
    ``= + - @``, tab or carriage return gets a leading single quote, so ``=HYPERLINK(...)`` shows as text."""
    return "'" + value if value.startswith(FORMULA_PREFIXES) else value


DIMENSIONS = ("workload", "team", "tenant", "namespace", "feature", "tier", "pool", "kind")


@dataclass(frozen=True, slots=True)
class ChargebackRow:
    key: str
    allocated_gpu_h: float
    used_gpu_h: float
    direct_units: int
    idle_units: int
    shared_units: int
    measured_gpu_h: float = 0.0  # the GPU-hours held whose utilization was measured
    cents: tuple[int, int, int] = (0, 0, 0)  # direct, idle, shared: apportioned over the report by chargeback()

    @property
    def total_units(self) -> int:
        return self.direct_units + self.idle_units + self.shared_units

    @property
    def usd(self) -> tuple[Decimal, Decimal, Decimal]:
        """Direct, idle and shared dollars as shown (the apportioned cents)."""
        direct, idle, shared = (c * CENT for c in self.cents)
        return direct, idle, shared

    @property
    def utilization(self) -> float | None:
        """Used over measured GPU-hours (None where nothing was measured): time without telemetry is unknown."""
        return self.used_gpu_h / self.measured_gpu_h if self.measured_gpu_h > 0 else None

    @property
    def total_usd(self) -> Decimal:
        """The row's total as shown: its apportioned cents (they sum to the fleet cost in cents over the rows)."""
        return sum(self.cents) * CENT


@dataclass(frozen=True, slots=True)
class ChargebackReport:
    """Rows sorted by total cost (descending). ``mode`` is ``chargeback`` (billed) or ``showback`` (shown)."""

    dim: str
    t0_s: int
    t1_s: int
    mode: str
    rows: tuple[ChargebackRow, ...]
    fleet_units: int

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(
            [
                self.dim,
                "allocated_gpu_h",
                "used_gpu_h",
                "utilization",
                "measured_gpu_h",
                "direct_usd",
                "idle_usd",
                "shared_usd",
                "total_usd",
            ]
        )
        for r in self.rows:
            util = "" if r.utilization is None else f"{r.utilization:.4f}"
            w.writerow(
                [csv_text_cell(r.key), f"{r.allocated_gpu_h:.4f}", f"{r.used_gpu_h:.4f}", util, f"{r.measured_gpu_h:.4f}",
                 *r.usd, r.total_usd]
            )  # fmt: skip
        alloc_h = sum(r.allocated_gpu_h for r in self.rows)
        used_h = sum(r.used_gpu_h for r in self.rows)
        measured_h = sum(r.measured_gpu_h for r in self.rows)
        w.writerow(
            ["TOTAL", f"{alloc_h:.4f}", f"{used_h:.4f}", f"{used_h / measured_h:.4f}" if measured_h else "",
             f"{measured_h:.4f}", *self.total_usd_by_kind, units_to_cents(self.fleet_units)]
        )  # fmt: skip
        return buf.getvalue()

    @property
    def total_usd_by_kind(self) -> tuple[Decimal, Decimal, Decimal]:
        """Direct, idle and shared dollars of the TOTAL row: the sums of the rows' (they add up to the fleet cost
        rounded to the cent; each may differ from its own units rounded alone by a cent)."""
        direct, idle, shared = (sum(r.cents[k] for r in self.rows) * CENT for k in range(3))
        return direct, idle, shared


def chargeback(
    result: CostAllocation,
    allocations: Sequence[AllocationSpan],
    dim: str,
    usage: UsageTotals | None = None,
    *,
    mode: str = "chargeback",
) -> ChargebackReport:
    """Group the cost lines of ``result`` by ``dim``; GPU-hours come from the allocations (``usage`` is aligned
    with ``allocations``: ``usage.used_gpu_s[j]`` belongs to ``allocations[j]``)."""
    if dim not in DIMENSIONS:
        raise ValidationError("group_by", f"unknown dimension {dim!r}; one of {', '.join(DIMENSIONS)}")
    units: dict[str, dict[LineKind, int]] = defaultdict(lambda: defaultdict(int))
    for ln in result.lines:
        units[ln.label(dim)][ln.kind] += ln.units
    held_h: dict[str, float] = defaultdict(float)
    used_h: dict[str, float] = defaultdict(float)
    measured_h: dict[str, float] = defaultdict(float)
    if dim not in ("kind",):
        for j, a in enumerate(allocations):
            ps = result.part_s_by_allocation.get(a.id, 0)
            if ps == 0:
                continue
            key = a.label(dim) if dim not in ("tier", "pool") else _pool_key(result, a, dim)
            held_h[key] += ps / PARTS_PER_GPU / 3600
            if usage is not None:  # samples covering more than was held (buckets past the span) are scaled to it
                sampled, held = float(usage.sampled_gpu_s[j]), ps / PARTS_PER_GPU
                scale = held / sampled if sampled > held else 1.0
                used_h[key] += float(usage.used_gpu_s[j]) * scale / 3600
                measured_h[key] += min(sampled, held) / 3600
    keys = sorted(set(units) | set(held_h), key=lambda k: (-sum(units[k].values()), k))
    fleet_cents = int(units_to_cents(result.fleet_units) / CENT)
    rows: list[ChargebackRow] = []
    for key, row_cents in zip(keys, _cents(fleet_cents, [sum(units[k].values()) for k in keys]), strict=True):
        direct, idle, shared = units[key][LineKind.DIRECT], units[key][LineKind.IDLE], units[key][LineKind.SHARED]
        d, i, s = _cents(row_cents, [direct, idle, shared])
        rows.append(
            ChargebackRow(key, held_h.get(key, 0.0), used_h.get(key, 0.0), direct, idle, shared,
                          measured_h.get(key, 0.0), cents=(d, i, s))
        )  # fmt: skip
    return ChargebackReport(dim, result.t0_s, result.t1_s, mode, tuple(rows), result.fleet_units)


def _cents(total_cents: int, weights: list[int]) -> list[int]:
    """``total_cents`` split by largest remainder in proportion to ``weights`` (ledger units, >= 0)."""
    return apportion(total_cents, weights) if sum(weights) > 0 else [0] * len(weights)


def _pool_key(result: CostAllocation, a: AllocationSpan, dim: str) -> str:
    if dim == "pool":
        return a.pool_id
    for p in result.pools:
        if p.pool_id == a.pool_id:
            return p.tier.value
    return ""


@dataclass(frozen=True, slots=True)
class ServingUnitCost:
    workload_id: str
    cost_units: int
    tokens: int

    @property
    def usd_per_million_tokens(self) -> Decimal | None:
        if self.tokens <= 0:
            return None
        return (units_to_usd(self.cost_units) * 1_000_000 / self.tokens).quantize(Decimal("0.0001"))


def serving_unit_costs(result: CostAllocation, tokens_by_workload: Mapping[str, int]) -> list[ServingUnitCost]:
    """Cost per million tokens for each serving workload: all of its lines (direct, idle and shared received)."""
    cost: dict[str, int] = defaultdict(int)
    for ln in result.lines:
        if ln.workload_id in tokens_by_workload:
            cost[ln.workload_id] += ln.units
    return [ServingUnitCost(w, cost.get(w, 0), int(t)) for w, t in sorted(tokens_by_workload.items())]
