"""Cost allocation: split what each pool cost over a window among the allocations that held it, exactly.

Invariant (tested as a property): the integer ledger units of all lines sum to the fleet cost, and
direct + idle == fleet cost, whatever the distribution rules. Splits use the largest-remainder method on
integers, so no unit is created or lost by rounding.

Within a pool the price is blended: a pool's cost (all its capacity blocks over the window) is shared by
part-seconds; the capacity part-seconds nobody held are the pool's idle (for a reserved pool: the unused
part of the reservation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from gpufleet.cost.model import (
    IDLE_OWNER,
    PARTS_PER_GPU,
    SHARED_OWNER,
    AllocationSpan,
    CapacityBlock,
    DistributionRule,
    LineKind,
)
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import Tier


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` that sum to ``total`` exactly.

    Largest remainder (Hamilton): floor shares first, then one unit each to the largest remainders, ties to the
    lower index so the split is deterministic.
    """
    if total < 0:
        raise ValidationError("total", f"must be >= 0, got {total}")
    w_sum = sum(weights)
    if any(w < 0 for w in weights) or w_sum <= 0:
        raise ValidationError("weights", "must be >= 0 with a positive sum")
    shares = [total * w // w_sum for w in weights]
    left = total - sum(shares)
    if left:
        rems = [total * w % w_sum for w in weights]
        for i in sorted(range(len(weights)), key=lambda i: (-rems[i], i))[:left]:
            shares[i] += 1
    return shares


@dataclass(frozen=True, slots=True)
class CostLine:
    """Ledger units charged to one set of labels. ``source_id`` says what was redistributed (pool or shared)."""

    kind: LineKind
    pool_id: str
    tier: str
    allocation_id: str
    workload_id: str
    team_id: str
    tenant_id: str
    namespace: str
    feature: str
    units: int
    source_id: str = ""

    def label(self, dim: str) -> str:
        return {
            "workload": self.workload_id,
            "team": self.team_id,
            "tenant": self.tenant_id,
            "namespace": self.namespace,
            "feature": self.feature,
            "tier": self.tier,
            "pool": self.pool_id,
            "kind": self.kind.value,
        }[dim]


@dataclass(frozen=True, slots=True)
class PoolCost:
    """One pool over the window: what it cost, what was held, what sat idle."""

    pool_id: str
    tier: Tier
    sku_id: str
    cost_units: int
    capacity_part_s: int
    allocated_part_s: int
    idle_units: int

    @property
    def capacity_gpu_h(self) -> float:
        return self.capacity_part_s / PARTS_PER_GPU / 3600

    @property
    def allocated_gpu_h(self) -> float:
        return self.allocated_part_s / PARTS_PER_GPU / 3600

    @property
    def idle_gpu_h(self) -> float:
        return (self.capacity_part_s - self.allocated_part_s) / PARTS_PER_GPU / 3600


@dataclass(frozen=True, slots=True)
class CostAllocation:
    """The result of :func:`allocate_costs`: every unit of fleet cost on exactly one line."""

    t0_s: int
    t1_s: int
    idle_rule: DistributionRule
    shared_rule: DistributionRule
    fleet_units: int
    direct_units: int
    idle_units: int
    pools: tuple[PoolCost, ...]
    lines: tuple[CostLine, ...]
    direct_by_allocation: dict[str, int]
    part_s_by_allocation: dict[str, int]

    @property
    def conserved(self) -> bool:
        return sum(ln.units for ln in self.lines) == self.fleet_units == self.direct_units + self.idle_units


def _owned_line(kind: LineKind, a: AllocationSpan, pool: PoolCost, units: int, source_id: str = "") -> CostLine:
    return CostLine(
        kind, pool.pool_id, pool.tier.value, a.id, a.workload_id, a.team_id, a.tenant_id, a.namespace, a.feature,
        units, source_id,
    )  # fmt: skip


def _unowned_line(kind: LineKind, pool_id: str, tier: str, team: str, units: int, source_id: str) -> CostLine:
    """A line no allocation caused: charged to ``team`` (an owner, or the idle/shared placeholder); its other
    labels are the placeholder, since idle capacity has no tenant, namespace or feature."""
    other = IDLE_OWNER if kind is LineKind.IDLE else SHARED_OWNER
    return CostLine(kind, pool_id, tier, "", "", team, other, other, other, units, source_id)


def _pool_costs(blocks: Sequence[CapacityBlock], t0_s: int, t1_s: int) -> dict[str, PoolCost]:
    cost: dict[str, int] = defaultdict(int)
    cap: dict[str, int] = defaultdict(int)
    meta: dict[str, tuple[Tier, str]] = {}
    for b in blocks:
        if b.pool_id in meta and meta[b.pool_id] != (b.tier, b.sku_id):
            raise ValidationError(f"capacity[{b.id}]", f"pool {b.pool_id} mixes tiers or SKUs")
        meta[b.pool_id] = (b.tier, b.sku_id)
        cost[b.pool_id] += b.cost_units(t0_s, t1_s)
        cap[b.pool_id] += b.part_s(t0_s, t1_s)
    return {p: PoolCost(p, meta[p][0], meta[p][1], cost[p], cap[p], 0, 0) for p in meta}


def _check_never_over(
    capacity: Sequence[CapacityBlock],
    by_pool: dict[str, list[tuple[AllocationSpan, int]]],
    t0_s: int,
    t1_s: int,
) -> None:
    """Refuse a pool that holds more GPUs than it paid for at some moment of [t0_s, t1_s), naming the allocation
    that started last before that moment. A sweep over start/end events per pool: O(n log n)."""
    blocks: dict[str, list[CapacityBlock]] = defaultdict(list)
    for b in capacity:
        blocks[b.pool_id].append(b)
    for pid, held in by_pool.items():
        spans = [(max(b.start_s, t0_s), min(b.end_s, t1_s), -b.gpus * PARTS_PER_GPU) for b in blocks[pid]]
        spans += [(max(a.start_s, t0_s), min(a.end_s, t1_s), a.parts) for a, _ in held]
        spans = [s for s in spans if s[0] < s[1]]
        starts, ends, parts = (np.array(c, dtype=np.int64) for c in zip(*spans, strict=True))
        times = np.concatenate([starts, ends])
        order = np.argsort(times, kind="stable")
        over = np.cumsum(np.concatenate([parts, -parts])[order])  # parts held minus parts paid for, after each event
        t_sorted = times[order]
        last_at_t = np.append(t_sorted[1:] != t_sorted[:-1], True)  # all events at one time apply together
        bad = np.flatnonzero(last_at_t & (over > 0))
        if len(bad) == 0:
            continue
        t = int(t_sorted[bad[0]])
        holding = [a for a, _ in held if max(a.start_s, t0_s) <= t < min(a.end_s, t1_s)]
        paid = sum(b.gpus for b in blocks[pid] if max(b.start_s, t0_s) <= t < min(b.end_s, t1_s))
        culprit = max(holding, key=lambda a: a.start_s)
        gpus = sum(a.parts for a in holding) / PARTS_PER_GPU
        when = datetime.fromtimestamp(t, UTC).isoformat()
        raise ValidationError(
            f"allocation[{culprit.id}]",
            f"pool {pid!r} holds {gpus:g} GPUs at {when} but paid for {paid}: over-allocated",
        )


def allocate_costs(
    capacity: Sequence[CapacityBlock],
    allocations: Sequence[AllocationSpan],
    t0_s: int,
    t1_s: int,
    *,
    idle_rule: DistributionRule = DistributionRule.SEPARATE_LINE,
    shared_rule: DistributionRule = DistributionRule.PROPORTIONAL,
) -> CostAllocation:
    """Charge the window [t0_s, t1_s) of every pool to its allocations, idle and shared lines.

    Raises ValidationError when two allocations share an id, an allocation sits in a pool with no capacity or a
    pool is over-allocated at any moment of the window (more GPUs held than paid for then): such books are refused.
    """
    if t1_s <= t0_s:
        raise ValidationError("window", "t1_s must be after t0_s")
    pools = _pool_costs(capacity, t0_s, t1_s)
    by_pool: dict[str, list[tuple[AllocationSpan, int]]] = defaultdict(list)
    seen: set[str] = set()
    for a in allocations:
        if a.id in seen:  # part-seconds and direct cost are keyed by id: a second one would be counted twice
            raise ValidationError(f"allocation[{a.id}].id", "two allocations have this id")
        seen.add(a.id)
        w = a.part_s(t0_s, t1_s)
        if w == 0:
            continue
        if a.pool_id not in pools:
            raise ValidationError(f"allocation[{a.id}].pool_id", f"pool {a.pool_id!r} has no capacity in the window")
        by_pool[a.pool_id].append((a, w))
    _check_never_over(capacity, by_pool, t0_s, t1_s)

    direct: dict[str, int] = {}
    part_s: dict[str, int] = {}
    lines: list[CostLine] = []
    idle_pots: list[tuple[PoolCost, int]] = []
    shared_pot: list[tuple[AllocationSpan, PoolCost, int]] = []
    receivers_by_pool: dict[str, list[tuple[AllocationSpan, PoolCost, int]]] = defaultdict(list)
    for pid, pool in pools.items():
        held = by_pool.get(pid, [])
        held_part_s = sum(w for _, w in held)  # <= capacity_part_s: never over at any moment (checked above)
        weights = [w for _, w in held] + [pool.capacity_part_s - held_part_s]
        shares = apportion(pool.cost_units, weights) if pool.capacity_part_s > 0 else [0] * len(weights)
        pool = PoolCost(pid, pool.tier, pool.sku_id, pool.cost_units, pool.capacity_part_s, held_part_s, shares[-1])
        pools[pid] = pool
        for (a, w), units in zip(held, shares, strict=False):
            direct[a.id] = direct.get(a.id, 0) + units
            part_s[a.id] = part_s.get(a.id, 0) + w
            if a.shared:
                shared_pot.append((a, pool, units))
            else:
                lines.append(_owned_line(LineKind.DIRECT, a, pool, units))
                receivers_by_pool[pid].append((a, pool, units))
        idle_pots.append((pool, shares[-1]))

    all_receivers = [r for rs in receivers_by_pool.values() for r in rs if r[2] > 0]
    for pool, idle in idle_pots:
        lines.extend(
            _idle_lines(pool, idle, idle_rule, capacity, receivers_by_pool[pool.pool_id], all_receivers, t0_s, t1_s)
        )
    lines.extend(_shared_lines(shared_pot, shared_rule, all_receivers))

    return CostAllocation(
        t0_s=t0_s,
        t1_s=t1_s,
        idle_rule=idle_rule,
        shared_rule=shared_rule,
        fleet_units=sum(p.cost_units for p in pools.values()),
        direct_units=sum(direct.values()),
        idle_units=sum(i for _, i in idle_pots),
        pools=tuple(sorted(pools.values(), key=lambda p: p.pool_id)),
        lines=tuple(ln for ln in lines if ln.units != 0),
        direct_by_allocation=direct,
        part_s_by_allocation=part_s,
    )


def _spread(
    kind: LineKind, units: int, receivers: list[tuple[AllocationSpan, PoolCost, int]], source_id: str
) -> list[CostLine]:
    shares = apportion(units, [u for _, _, u in receivers])
    return [_owned_line(kind, a, p, s, source_id) for (a, p, _), s in zip(receivers, shares, strict=True)]


def _idle_lines(
    pool: PoolCost,
    idle: int,
    rule: DistributionRule,
    capacity: Sequence[CapacityBlock],
    pool_receivers: list[tuple[AllocationSpan, PoolCost, int]],
    all_receivers: list[tuple[AllocationSpan, PoolCost, int]],
    t0_s: int,
    t1_s: int,
) -> list[CostLine]:
    if idle == 0:
        return []
    tier = pool.tier.value
    if rule is DistributionRule.TO_OWNER:
        blocks = [b for b in capacity if b.pool_id == pool.pool_id and b.part_s(t0_s, t1_s) > 0]
        shares = apportion(idle, [b.part_s(t0_s, t1_s) for b in blocks])
        return [
            _unowned_line(LineKind.IDLE, pool.pool_id, tier, b.owner_team_id or IDLE_OWNER, s, pool.pool_id)
            for b, s in zip(blocks, shares, strict=True)
        ]
    if rule is DistributionRule.PROPORTIONAL:
        receivers = [r for r in pool_receivers if r[2] > 0] or all_receivers
        if receivers:
            return _spread(LineKind.IDLE, idle, receivers, pool.pool_id)
    return [_unowned_line(LineKind.IDLE, pool.pool_id, tier, IDLE_OWNER, idle, pool.pool_id)]


def _shared_lines(
    pot: list[tuple[AllocationSpan, PoolCost, int]],
    rule: DistributionRule,
    all_receivers: list[tuple[AllocationSpan, PoolCost, int]],
) -> list[CostLine]:
    out: list[CostLine] = []
    if rule is DistributionRule.PROPORTIONAL and all_receivers:
        total = sum(u for _, _, u in pot)
        if total:
            out.extend(_spread(LineKind.SHARED, total, all_receivers, SHARED_OWNER))
        return out
    for a, pool, units in pot:
        if rule is DistributionRule.TO_OWNER:
            out.append(_owned_line(LineKind.SHARED, a, pool, units, a.id))
        else:
            out.append(_unowned_line(LineKind.SHARED, pool.pool_id, pool.tier.value, SHARED_OWNER, units, a.id))
    return out
