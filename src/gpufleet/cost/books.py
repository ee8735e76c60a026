"""Turn the service's stored rows into the cost package's books: capacity blocks, allocation spans, usage.

Pure functions over plain row tuples (no database here; the service loads the rows, :class:`gpufleet.control.metering.Meter` runs them).

Attribution rule: a utilization row that names its pool is charged to that pool: a pay-per-use pool (on-demand,
spot, secondary) at its own price; a reserved pool rides that pool's active reservations (first, before rows that
name no pool), any excess falls to on-demand. A row that names no pool (older telemetry) follows the fallback: at
every moment, a SKU's GPUs in use ride the active reservations of that SKU first (what placement does: reserved
-> on-demand), filled in workload-id order; the rest is on-demand at the SKU's cheapest on-demand pool, paid per
use in whole GPUs (a fractional on-demand allocation pays for the whole GPU; the unused share is that pool's idle).
Records of different bucket lengths and starts that overlap in time are filled together, sub-interval by
sub-interval, so a reservation is never held by more GPUs than it has; a reservation that starts or ends inside a
bucket splits it there and covers the part it was active in (the rest falls to on-demand); a workload riding two reservations of one
pool at once is one allocation there. The unused part of a reservation is
its pool's idle. So the fleet cost is reservations amortized over their terms + on-demand as used, and
``direct + idle == fleet`` holds exactly (the cost package's invariant).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, UsageColumns
from gpufleet.cost.prices import PriceHistory
from gpufleet.domain.pools import Tier


@dataclass(frozen=True, slots=True)
class UtilRec:
    workload_id: str
    team_id: str
    sku_id: str
    start_s: int
    bucket_s: int
    gpus: float
    util: float  # 0..1; NaN: not measured (the GPUs held count, the time is neither busy nor idle)
    pool_id: str | None = None  # the pool the GPUs ran in, when the telemetry says
    gpu_mem_gb: float = math.nan  # the most GPU memory one replica used (GB over its GPUs); NaN: not measured


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
    usage: UsageTotals  # aligned with allocations


@dataclass(slots=True)
class _Piece:
    """A run of consecutive buckets in which a workload held the same parts of one pool (merged as it grows)."""

    workload_id: str
    team_id: str
    pool_id: str
    sku_id: str
    parts: int
    start_s: int
    end_s: int
    on_demand_price: int | None  # None for a reservation's pool
    tier: Tier  # pay-per-use pools: the tier of the block; RESERVED for a reservation piece
    samples: int  # buckets with a measured utilization
    util_sum: float
    used_gpu_s: float
    sampled_gpu_s: float  # GPU-seconds of the buckets with a measured utilization


def build_books(
    recs: Sequence[UtilRec],
    workloads: Mapping[str, WorkloadInfo],
    reservations: Sequence[ReservedBlock],
    on_demand: Mapping[str, tuple[str, int]],  # sku -> (pool id, price uusd per GPU-hour)
    t0_s: int,
    t1_s: int,
    pools: Mapping[str, tuple[Tier, int]] | None = None,  # pool id -> (tier, price uusd per GPU-hour)
    history: PriceHistory | None = None,
) -> Books:
    """Allocation spans clipped to [t0_s, t1_s), split between reserved and on-demand bucket by bucket; consecutive
    buckets where a workload held the same parts of the same pool at the same price are merged into one span (and
    one on-demand block), so a steady fleet has few spans however fine its telemetry.

    ``history``: the pools' past prices (:mod:`gpufleet.cost.prices`); with it every sub-interval is charged at the
    prices of its own moment (a bucket that spans a price change is split at the change), and ``pools`` /
    ``on_demand`` give only the tiers and the fallback for a SKU without an on-demand pool."""
    capacity = [
        CapacityBlock(r.id, r.pool_id, Tier.RESERVED, r.sku_id, r.units, r.start_s, r.end_s, r.price_uusd_per_gpu_h)
        for r in reservations
    ]
    known = pools or {}
    by_sku: dict[str, list[UtilRec]] = defaultdict(list)
    for r in recs:
        by_sku[r.sku_id].append(r)
    pieces: list[_Piece] = []
    tail: dict[tuple[str, str, int, int | None], int] = {}  # (workload, pool, parts, price) -> its latest piece
    priced = history if history is not None and history.changed else None

    def add(
        r: UtilRec, pool_id: str, parts: int, s0: int, s1: int, price: int | None, tier: Tier, sample: bool = True
    ) -> None:
        """``sample``: False for a later part of a record already counted as a sample of the piece it extends."""
        measured = not math.isnan(r.util)
        used = min(max(r.util, 0.0), 1.0) if measured else 0.0
        gpu_s = (s1 - s0) * parts / PARTS_PER_GPU if measured else 0.0
        key = (r.workload_id, pool_id, parts, price)
        i = tail.get(key)
        if i is not None and pieces[i].end_s == s0:
            p = pieces[i]
            p.end_s = s1
            p.samples += int(measured and sample)
            p.util_sum += used if sample else 0.0
            p.used_gpu_s += used * gpu_s
            p.sampled_gpu_s += gpu_s
            return
        tail[key] = len(pieces)
        pieces.append(_Piece(r.workload_id, r.team_id, pool_id, r.sku_id, parts, s0, s1, price, tier, int(measured),
                             used, used * gpu_s, gpu_s))  # fmt: skip

    for sku, rows in sorted(by_sku.items()):
        # one sweep per SKU over the instants at which a record begins or ends (clipped to the window) or a price
        # changes: in each sub-interval every record holding GPUs then is filled together, so records of different
        # starts and bucket lengths that overlap share the reservations, never take them twice
        rows.sort(key=lambda r: (r.pool_id is None or r.pool_id not in known, r.workload_id))
        spans = [(max(r.start_s, t0_s), min(r.start_s + r.bucket_s, t1_s)) for r in rows]
        order = sorted((i for i, (a, b) in enumerate(spans) if a < b), key=lambda i: spans[i][0])
        if not order:
            continue
        cuts = {a for a, _ in spans} | {b for _, b in spans}
        lo, hi = spans[order[0]][0], max(b for _, b in spans)
        # a reservation that starts or ends inside a bucket splits it: it covers the part it was active in
        cuts.update(e for b in reservations if b.sku_id == sku for e in (b.start_s, b.end_s) if lo < e < hi)
        if priced is not None:  # a price that changed inside a bucket splits it
            cuts.update(priced.cuts(sku, lo, hi))
        edges = sorted(cuts)
        active: list[int] = []
        nxt = 0
        for s0, s1 in pairwise(edges):
            joined = nxt
            while nxt < len(order) and spans[order[nxt]][0] <= s0:
                active.append(order[nxt])
                nxt += 1
            active = [i for i in active if spans[i][1] > s0]
            if nxt > joined:
                active.sort()  # the rows' order (by index): rows naming a known pool first, then by workload
            if not active:
                continue
            free = {
                b.id: b.units * PARTS_PER_GPU
                for b in reservations
                if b.sku_id == sku and b.start_s <= s0 and b.end_s >= s1
            }
            for i in active:
                r = rows[i]
                sample = s0 == spans[i][0]
                need = round(r.gpus * PARTS_PER_GPU)
                if need <= 0:
                    continue  # held nothing (a meter's record of a pod holding no GPU): no allocation
                named = known.get(r.pool_id) if r.pool_id is not None else None
                if named is not None and named[0] is not Tier.RESERVED:
                    price = named[1] if priced is None else priced.at(str(r.pool_id), s0)
                    add(r, str(r.pool_id), need, s0, s1, named[1] if price is None else price, named[0], sample)
                    continue
                taken: dict[str, int] = {}  # reservation pool -> parts: one piece per pool, however many reservations
                for b in reservations:
                    if need <= 0:
                        break
                    if named is not None and b.pool_id != r.pool_id:
                        continue  # a row that names a reserved pool rides only that pool's reservations
                    take = min(need, free.get(b.id, 0))
                    if take > 0:
                        free[b.id] -= take
                        need -= take
                        taken[b.pool_id] = taken.get(b.pool_id, 0) + take
                for pool_id, parts in taken.items():
                    add(r, pool_id, parts, s0, s1, None, Tier.RESERVED, sample)
                if need > 0:
                    cheapest = None if priced is None else priced.cheapest_on_demand(sku, s0)
                    pool_id, price = on_demand[sku] if cheapest is None else cheapest
                    add(r, pool_id, need, s0, s1, price, Tier.ON_DEMAND, sample)

    allocs: list[AllocationSpan] = []
    ids: set[str] = set()
    for p in pieces:
        w = workloads.get(p.workload_id)
        tenant, feature, serving = (w.tenant_id, w.feature, w.kind == "serving") if w else ("-", "-", False)
        aid = base = f"{p.workload_id}@{p.start_s}/{p.pool_id}/{p.parts}"
        n = 1
        while aid in ids:  # two records of one workload in one pool at once (two sources, two bucket lengths)
            n += 1
            aid = f"{base}#{n}"
        ids.add(aid)
        allocs.append(AllocationSpan(aid, p.workload_id, p.team_id, tenant, p.team_id, feature, p.pool_id, p.sku_id,
                                     p.parts, p.start_s, p.end_s, serving=serving))  # fmt: skip
        if p.on_demand_price is not None:
            gpus = math.ceil(p.parts / PARTS_PER_GPU)
            capacity.append(
                CapacityBlock(aid, p.pool_id, p.tier, p.sku_id, gpus, p.start_s, p.end_s, p.on_demand_price)
            )
    usage = UsageTotals(
        np.array([p.samples for p in pieces], dtype=np.int64),
        np.array([p.util_sum for p in pieces], dtype=np.float64),
        np.array([p.used_gpu_s for p in pieces], dtype=np.float64),
        np.array([p.sampled_gpu_s for p in pieces], dtype=np.float64),
    )
    return Books(capacity, allocs, usage)


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
