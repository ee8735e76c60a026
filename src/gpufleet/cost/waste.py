"""Idle waste: THE one definition, used by ``/v1/fleet/utilization``, a workload's cost and the dashboard.

Idle waste is the cost of paid GPU time that did no work, priced at what that time cost (the price of the pool
it was bought in: a reservation's amortized rate, the on-demand or spot price):

* **unbusy**: GPUs held by an allocation but not busy, over the time its utilization was measured: each
  allocation's direct cost x (measured GPU-seconds - used GPU-seconds) / held GPU-seconds. Time without telemetry
  (an allocation without any, a gap, a record whose utilization was not measured) counts as busy: missing data is
  never waste. With telemetry throughout this is direct cost x (1 - used / held);
* **unallocated**: paid capacity nobody held: the cost package's idle lines (unused reservations, the unused
  share of whole on-demand GPUs).

``idle_waste_usd = unbusy + unallocated``. A scope (a SKU, a region's pools, a team, one workload) keeps the
allocations and the pools it covers; unallocated capacity belongs to no workload, so a workload's waste is its
unbusy part only, and a team's includes idle lines only if they were charged to the team.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpufleet.cost.allocate import CostAllocation, CostLine
from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, LineKind


@dataclass(frozen=True, slots=True)
class IdleWaste:
    unbusy_units: int
    unallocated_units: int

    @property
    def total_units(self) -> int:
        return self.unbusy_units + self.unallocated_units


def idle_waste(
    result: CostAllocation,
    allocations: Sequence[AllocationSpan],
    usage: UsageTotals | None,
    *,
    keep_allocation: Callable[[AllocationSpan], bool] = lambda _a: True,
    keep_idle_line: Callable[[CostLine], bool] = lambda _ln: True,
) -> IdleWaste:
    """Idle waste of the allocations and idle lines a scope keeps (``usage`` aligned with ``allocations``)."""
    unbusy = 0.0
    for j, a in enumerate(allocations):
        if not keep_allocation(a):
            continue
        direct = result.direct_by_allocation.get(a.id, 0)
        held_gpu_s = result.part_s_by_allocation.get(a.id, 0) / PARTS_PER_GPU
        if direct <= 0 or held_gpu_s <= 0 or usage is None or usage.samples[j] == 0:
            continue
        measured = min(float(usage.sampled_gpu_s[j]), held_gpu_s)
        unbusy += direct * max(0.0, measured - float(usage.used_gpu_s[j])) / held_gpu_s
    unallocated = sum(ln.units for ln in result.lines if ln.kind is LineKind.IDLE and keep_idle_line(ln))
    return IdleWaste(round(unbusy), unallocated)
