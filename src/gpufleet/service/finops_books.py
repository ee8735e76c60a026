"""Turn the service's stored rows into the cost package's books: capacity blocks, allocation spans, usage.

Pure functions over plain row tuples (no database here; :mod:`gpufleet.service.finops` loads the rows).

Attribution rule (utilization rows do not record their pool): in every bucket, a SKU's GPUs in use ride the
active reservations of that SKU first (what placement does: reserved -> on-demand), filled in workload-id order;
the rest is on-demand at the SKU's cheapest on-demand pool, paid per use in whole GPUs (a fractional on-demand
allocation pays for the whole GPU; the unused share is that pool's idle). The unused part of a reservation is
its pool's idle. So the fleet cost is reservations amortized over their terms + on-demand as used, and
``direct + idle == fleet`` holds exactly (the cost package's invariant).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, UsageColumns
from gpufleet.domain.pools import Tier


@dataclass(frozen=True, slots=True)
class UtilRec:
    workload_id: str
    team_id: str
    sku_id: str
    start_s: int
    bucket_s: int
    gpus: float
    util: float


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    workload_id: str
    team_id: str
    tenant_id: str
    kind: str
    feature: str  # the workload's name stands in for the product feature label


@dataclass(frozen=True, slots=True)
class ReservedBlock:
    id: str
    pool_id: str
    sku_id: str
    units: int
    start_s: int
    end_s: int
    price_uusd_per_gpu_h: int


@dataclass(frozen=True, slots=True)
class Books:
    capacity: list[CapacityBlock]
    allocations: list[AllocationSpan]
    usage: UsageTotals
    util: list[float]  # per allocation


def build_books(
    recs: Sequence[UtilRec],
    workloads: Mapping[str, WorkloadInfo],
    reservations: Sequence[ReservedBlock],
    on_demand: Mapping[str, tuple[str, int]],  # sku -> (pool id, price uusd per GPU-hour)
    t0_s: int,
    t1_s: int,
) -> Books:
    """One allocation span per (workload, bucket) clipped to [t0_s, t1_s), split between reserved and on-demand."""
    capacity = [
        CapacityBlock(r.id, r.pool_id, Tier.RESERVED, r.sku_id, r.units, r.start_s, r.end_s, r.price_uusd_per_gpu_h)
        for r in reservations
    ]
    by_bucket: dict[tuple[str, int], list[UtilRec]] = defaultdict(list)
    for r in recs:
        by_bucket[(r.sku_id, r.start_s)].append(r)
    allocs: list[AllocationSpan] = []
    util: list[float] = []
    for (sku, start), rows in sorted(by_bucket.items()):
        rows.sort(key=lambda r: r.workload_id)
        end = start + max(r.bucket_s for r in rows)
        s0, s1 = max(start, t0_s), min(end, t1_s)
        if s1 <= s0:
            continue
        free = {
            b.id: b.units * PARTS_PER_GPU for b in reservations if b.sku_id == sku and b.start_s <= s0 and b.end_s >= s1
        }
        pools = {b.id: b.pool_id for b in reservations}
        for r in rows:
            need = round(r.gpus * PARTS_PER_GPU)
            if need <= 0:
                continue
            w = workloads.get(r.workload_id)
            tenant, feature, serving = (w.tenant_id, w.feature, w.kind == "serving") if w else ("-", "-", False)
            for res_id in list(free):
                take = min(need, free[res_id])
                if take <= 0:
                    continue
                free[res_id] -= take
                need -= take
                allocs.append(AllocationSpan(f"{r.workload_id}@{start}/{res_id}", r.workload_id, r.team_id, tenant,
                                             r.team_id, feature, pools[res_id], sku, take, s0, s1, serving=serving))  # fmt: skip
                util.append(r.util)
                if need == 0:
                    break
            if need > 0:
                pool_id, price = on_demand[sku]
                aid = f"{r.workload_id}@{start}/od"
                allocs.append(AllocationSpan(aid, r.workload_id, r.team_id, tenant, r.team_id, feature, pool_id, sku,
                                             need, s0, s1, serving=serving))  # fmt: skip
                util.append(r.util)
                capacity.append(
                    CapacityBlock(aid, pool_id, Tier.ON_DEMAND, sku, math.ceil(need / PARTS_PER_GPU), s0, s1, price)
                )
    n = len(allocs)
    dur = np.array([a.end_s - a.start_s for a in allocs], dtype=np.float64)
    gpus = np.array([a.parts / PARTS_PER_GPU for a in allocs], dtype=np.float64)
    u = np.clip(np.array(util, dtype=np.float64), 0.0, 1.0)
    usage = UsageTotals(np.ones(n, dtype=np.int64), u.copy(), u * dur * gpus, dur * gpus)
    return Books(capacity, allocs, usage, util)


def workload_columns(recs: Sequence[UtilRec], workload_ids: Sequence[str], t0_s: int) -> tuple[UsageColumns, list[int]]:
    """Utilization as columns with one allocation per workload (for idle detection); bucket = the smallest seen."""
    bucket_s = min((r.bucket_s for r in recs), default=300)
    index = {w: i for i, w in enumerate(workload_ids)}
    keep = [r for r in recs if r.workload_id in index and r.start_s >= t0_s]
    cols = UsageColumns(
        t0_s,
        bucket_s,
        np.array([(r.start_s - t0_s) // bucket_s for r in keep], dtype=np.int32),
        np.array([index[r.workload_id] for r in keep], dtype=np.int32),
        np.array([r.util for r in keep], dtype=np.float32),
    )
    return cols, [index[r.workload_id] for r in keep]
