"""Fleet utilization and workload cost, computed over stored utilization records.

Utilization figures come from the stored records (a record may name its pool, hence its region). Money comes
from the FinOps books (the cost package, each record charged to the pool it ran in): the routes add idle waste
(``cost/waste.py``, the one definition) and a workload's cost from there. The baseline here prices GPU-hours at
the SKU's on-demand list price only where the books have nothing (a workload with no allocation in the window);
rightsizing sizes to the p95 of busy GPUs at a target utilization, never below the GPUs a replica's GPU memory needs
(as the recommendation's ``recommend`` and the apply path: the p99 of the measured ``gpu_mem_gb`` with its headroom;
none measured, the replica's GPUs are kept). A record whose utilization was not measured (``gpu_util`` NULL: the
Kubernetes meter without DCGM) counts its GPU-hours and cost, and is left out of every busy or idle figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select

from gpufleet.adapters.sql.models import PoolRow, RegionRow, SkuRow, UtilizationRow, WorkloadRow
from gpufleet.control.costing import bucket_gpu_memory, gpu_memory_floor, gpu_memory_percentile
from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.errors import PermissionDenied, ValidationError
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.pools import Tier
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork
from gpufleet.service.workloads import WorkloadService

RIGHTSIZE_TARGET_UTIL = 0.8  # size so the p95 busy GPUs run at 80 %: headroom for bursts
CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class Usage:
    gpus: np.ndarray  # gpus allocated per bucket
    util: np.ndarray  # 0..1, NaN where not measured
    bucket_s: np.ndarray
    queue_wait_s: np.ndarray  # NaN where absent
    start_s: np.ndarray  # the bucket's start
    gpu_mem_gb: np.ndarray  # the most GPU memory one replica used, NaN where not measured


def _usd(x: float) -> Decimal:
    return Decimal(repr(x)).quantize(CENT, rounding=ROUND_HALF_EVEN)


def on_demand_uusd(uow: UnitOfWork, sku_id: str) -> int:
    price = uow.session.scalar(
        select(func.min(PoolRow.price_uusd_per_gpu_h)).where(
            PoolRow.sku_id == sku_id, PoolRow.tier == Tier.ON_DEMAND.value
        )
    )
    if price is not None:
        return int(price)
    listed = PRICES_BY_SKU.get(sku_id)
    return price_to_uusd(listed.on_demand) if listed else 0


def _load(uow: UnitOfWork, *conds: Any) -> Usage:
    rows = uow.session.execute(
        select(
            UtilizationRow.gpus_allocated,
            UtilizationRow.gpu_util,
            UtilizationRow.bucket_s,
            UtilizationRow.queue_wait_s,
            UtilizationRow.bucket_start_s,
            UtilizationRow.gpu_mem_gb,
        ).where(*conds)
    ).all()
    nan = math.nan
    arr = np.array(
        [
            (
                r[0],
                nan if r[1] is None else r[1],
                r[2],
                nan if r[3] is None else r[3],
                r[4],
                nan if r[5] is None else r[5],
            )
            for r in rows
        ],
        dtype=np.float64,
    ).reshape(-1, 6)
    return Usage(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], arr[:, 5])


def _busy_share(u: Usage) -> tuple[float | None, float]:
    """The GPU-seconds-weighted busy share of the measured records (None without any) and their GPU-hours: a record
    whose utilization was not measured is neither busy nor idle."""
    gpu_s = u.gpus * u.bucket_s
    measured = ~np.isnan(u.util)
    measured_gpu_s = float(gpu_s[measured].sum())
    if measured_gpu_s <= 0:
        return None, 0.0
    return float((gpu_s[measured] * u.util[measured]).sum() / measured_gpu_s), measured_gpu_s / 3600.0


class UsageService:
    def __init__(self, engine: Engine, clock: Clock, workloads: WorkloadService) -> None:
        self._engine = engine
        self._clock = clock
        self._workloads = workloads

    def fleet_utilization(
        self, actor: Actor, *, sku_id: str, window_s: int, region: str | None = None
    ) -> tuple[dict[str, Any], frozenset[str] | None]:
        """Utilization of a SKU over the window (in one region: records whose pool is in it), and the region's pool
        ids (None: every region) for the caller to scope idle waste with (``cost/waste.py``, priced by the
        FinOps books)."""
        if actor.role is Role.APP_TEAM:
            raise PermissionDenied("app_team tokens read their own workloads' costs, not fleet-wide utilization")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
            conds: list[Any] = [
                UtilizationRow.sku_id == sku_id,
                UtilizationRow.bucket_start_s >= now_s - window_s,
                UtilizationRow.bucket_start_s < now_s,
            ]
            pool_ids: frozenset[str] | None = None
            if region is not None:
                if uow.session.get(RegionRow, region) is None:
                    raise ValidationError("region", f"unknown region {region!r}")
                pool_ids = frozenset(uow.session.scalars(select(PoolRow.id).where(PoolRow.region_id == region)))
                conds.append(UtilizationRow.pool_id.in_(pool_ids))
            u = _load(uow, *conds)
        total_gpu_s = float((u.gpus * u.bucket_s).sum())
        avg_util, measured_gpu_h = _busy_share(u)
        waits = u.queue_wait_s[~np.isnan(u.queue_wait_s)]
        out = {
            "sku": sku_id,
            "region": region,
            "window_s": window_s,
            "avg_util": avg_util,
            "p95_queue_wait_sec": float(np.percentile(waits, 95)) if waits.size else None,
            "gpu_hours": round(total_gpu_s / 3600.0, 3),
            "util_measured_gpu_hours": round(measured_gpu_h, 3),
            "records": int(u.gpus.size),
            "price_basis": "cost_package",
        }
        return out, pool_ids

    def workload_cost(self, actor: Actor, workload_id: str, *, window_s: int) -> dict[str, Any]:
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            wl: WorkloadRow = self._workloads.get_row(uow, actor, workload_id)  # 403 for another team
            u = _load(
                uow,
                UtilizationRow.workload_id == workload_id,
                UtilizationRow.bucket_start_s >= now_s - window_s,
                UtilizationRow.bucket_start_s < now_s,
            )
            price = on_demand_uusd(uow, wl.gpu_sku) / 1e6
            memory_gb = uow.session.scalar(select(SkuRow.memory_gb).where(SkuRow.id == wl.gpu_sku))
        total_gpu_s = float((u.gpus * u.bucket_s).sum())
        busy, _ = _busy_share(u)
        cost = total_gpu_s / 3600.0 * price
        idle_pct = None if busy is None else 1.0 - busy  # a fraction, as the design has it; None: never measured
        return {
            "workload_id": workload_id,
            "window_s": window_s,
            "cost_usd": _usd(cost),
            "idle_pct": None if idle_pct is None else round(idle_pct, 4),
            "gpu_hours": round(total_gpu_s / 3600.0, 3),
            "rightsizing": _rightsizing(u, price, replica_gpus=wl.gpus, sku_memory_gb=float(memory_gb or 0)),
        }


NO_MEMORY: dict[str, Any] = {"gpu_memory": None, "p99_gpu_mem_gb": None, "memory_floor_gpus": None}


def _rightsizing(u: Usage, price_usd_per_gpu_h: float, *, replica_gpus: int, sku_memory_gb: float) -> dict[str, Any]:
    """The GPU-count baseline: the p95 busy GPUs at ``RIGHTSIZE_TARGET_UTIL``, never below ``memory_floor_gpus``:
    measured GPU memory (``gpu_memory`` ``measured``), the GPUs of the workload's SKU that hold its p99 with
    ``recommend``'s headroom; none measured (``unmeasured_kept``), the replica's GPUs (``replica_gpus``, at most the
    GPUs held), since nothing showed the model fits in less (the recommendation's ``gpu_memory_unmeasured_kept``)."""
    if u.gpus.size == 0:
        return {
            "reason": "no_data",
            "current_gpus": None,
            "p95_busy_gpus": None,
            "recommended_gpus": None,
            "target_util": RIGHTSIZE_TARGET_UTIL,
            "est_savings_usd_per_day": Decimal("0.00"),
            **NO_MEMORY,
        }
    # one bucket of the workload = every record starting then (one per pool, tier or source it held GPUs in), added up
    starts, idx = np.unique(u.start_s, return_inverse=True)
    held_s = np.bincount(idx, weights=u.gpus * u.bucket_s, minlength=starts.size)
    bucket_s = np.zeros(starts.size)
    np.maximum.at(bucket_s, idx, u.bucket_s)
    measured_rec = ~np.isnan(u.util)
    busy = np.bincount(idx[measured_rec], weights=(u.gpus * u.util)[measured_rec], minlength=starts.size)
    measured = np.bincount(idx[measured_rec], minlength=starts.size) > 0
    current = float(held_s.sum() / bucket_s.sum())
    if not measured.any():  # GPUs held, but how busy never measured: nothing to size to
        return {
            "reason": "no_utilization",
            "current_gpus": round(current, 3),
            "p95_busy_gpus": None,
            "recommended_gpus": None,
            "target_util": RIGHTSIZE_TARGET_UTIL,
            "est_savings_usd_per_day": Decimal("0.00"),
            **NO_MEMORY,
        }
    p95_busy = float(np.percentile(busy[measured], 95))
    # one replica's GPU memory per bucket and its p99, as the recommendation reads them (``control/costing.py``)
    p99 = gpu_memory_percentile(bucket_gpu_memory(idx, u.gpus, u.gpu_mem_gb, starts.size))
    p99_mem = None if math.isnan(p99) else p99
    if p99_mem is not None and sku_memory_gb > 0:
        floor = gpu_memory_floor(p99_mem, sku_memory_gb)
    else:  # not measured (or a SKU without its memory): keep the replica's GPUs
        floor = max(1, min(replica_gpus, math.ceil(current - 1e-9)))
    recommended = max(1, math.ceil(p95_busy / RIGHTSIZE_TARGET_UTIL - 1e-9), floor)
    delta = current - recommended
    if delta >= 1:
        reason = "overprovisioned"
    elif delta <= -1:
        reason = "underprovisioned"
    else:
        reason = "right_sized"
    savings_day = max(0.0, delta) * 24.0 * price_usd_per_gpu_h
    return {
        "reason": reason,
        "current_gpus": round(current, 3),
        "p95_busy_gpus": round(p95_busy, 3),
        "recommended_gpus": recommended,
        "target_util": RIGHTSIZE_TARGET_UTIL,
        "est_savings_usd_per_day": _usd(savings_day),
        "gpu_memory": "unmeasured_kept" if p99_mem is None else "measured",
        "p99_gpu_mem_gb": None if p99_mem is None else round(p99_mem, 3),
        "memory_floor_gpus": floor,
    }
