"""One workload's cost view, as the service's ``GET /v1/workloads/{id}/cost`` returns it.

Pure: built from a cost allocation, the allocations, their metered usage and the rightsizing recommendations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.cost.allocate import CostAllocation
from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, LineKind
from gpufleet.cost.rightsizing import Recommendation
from gpufleet.domain.errors import NotFoundError
from gpufleet.domain.money import units_to_cents


@dataclass(frozen=True, slots=True)
class WorkloadCost:
    workload_id: str
    team_id: str
    t0_s: int
    t1_s: int
    allocated_gpu_h: float
    used_gpu_h: float | None  # None without telemetry
    measured_gpu_h: float | None  # the GPU-hours held with a utilization reading (None without telemetry)
    direct_usd: Decimal
    idle_usd: Decimal
    shared_usd: Decimal
    total_units: int
    by_tier_usd: dict[str, Decimal]
    recommendations: tuple[Recommendation, ...]

    @property
    def total_usd(self) -> Decimal:
        return units_to_cents(self.total_units)

    @property
    def utilization(self) -> float | None:
        """Used over measured GPU-hours: None without telemetry or where nothing was measured."""
        if self.used_gpu_h is None or not self.measured_gpu_h:
            return None
        return self.used_gpu_h / self.measured_gpu_h


def workload_cost(
    workload_id: str,
    result: CostAllocation,
    allocations: Sequence[AllocationSpan],
    usage: UsageTotals | None = None,
    recommendations: Sequence[Recommendation] = (),
) -> WorkloadCost:
    """The workload's lines summed by kind and tier, GPU-hours held and used, and its recommendations.

    Raises NotFoundError when no allocation of the workload exists (a workload that held nothing in the window
    but exists elsewhere has allocations with zero overlap and gets a zero view)."""
    idx = [j for j, a in enumerate(allocations) if a.workload_id == workload_id]
    if not idx:
        raise NotFoundError("workload", workload_id)
    kinds = dict.fromkeys(LineKind, 0)
    tiers: dict[str, int] = {}
    for ln in result.lines:
        if ln.workload_id == workload_id:
            kinds[ln.kind] += ln.units
            tiers[ln.tier] = tiers.get(ln.tier, 0) + ln.units
    held = sum(result.part_s_by_allocation.get(allocations[j].id, 0) for j in idx) / PARTS_PER_GPU / 3600
    used = None if usage is None else float(sum(usage.used_gpu_s[j] for j in idx)) / 3600
    measured = None if usage is None else min(held, float(sum(usage.sampled_gpu_s[j] for j in idx)) / 3600)
    return WorkloadCost(
        workload_id=workload_id,
        team_id=allocations[idx[0]].team_id,
        t0_s=result.t0_s,
        t1_s=result.t1_s,
        allocated_gpu_h=held,
        used_gpu_h=used,
        measured_gpu_h=measured,
        direct_usd=units_to_cents(kinds[LineKind.DIRECT]),
        idle_usd=units_to_cents(kinds[LineKind.IDLE]),
        shared_usd=units_to_cents(kinds[LineKind.SHARED]),
        total_units=sum(kinds.values()),
        by_tier_usd={t: units_to_cents(u) for t, u in sorted(tiers.items())},
        recommendations=tuple(r for r in recommendations if r.workload_id == workload_id),
    )
