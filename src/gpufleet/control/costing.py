"""The cost decisions the service asks for beyond its books: idle waste (the one definition, ``cost/waste.py``),
rightsizing a workload from its measured utilization, and the rightsizing change lifecycle (one transition table,
``cost/changes.py``). Worlds reach the decision packages through control/ (the import contract in pyproject.toml).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpufleet.cost.books import UtilRec
from gpufleet.cost.changes import ChangeStatus, RightsizingChange, apply_change, rollback_change
from gpufleet.cost.rightsizing import Recommendation, ResourceSpec, RightsizingPolicy, UsageProfile, recommend
from gpufleet.cost.waste import IdleWaste, idle_waste

__all__ = [
    "GPU_MEMORY_PERCENTILE",
    "SKU_CANDIDATES",
    "ChangeStatus",
    "IdleWaste",
    "Recommendation",
    "ResourceSpec",
    "RightsizingChange",
    "change_spec",
    "gpu_memory_floor",
    "idle_waste",
    "rightsize",
]

SKU_CANDIDATES = ("h100_80gb", "h200_141gb", "a100_80gb", "l40s")
GPU_MEMORY_PERCENTILE = RightsizingPolicy().mem_percentile  # the percentile of GPU memory ``recommend`` sizes to


def gpu_memory_floor(gpu_mem_gb: float, memory_gb: float) -> int:
    """The GPUs of ``memory_gb`` each that hold ``gpu_mem_gb`` (a replica's measured GPU memory percentile) with the
    rightsizing headroom: the fewest ``recommend`` sizes a replica of that SKU to (at least 1)."""
    need = gpu_mem_gb * (1.0 + RightsizingPolicy().headroom)
    return max(1, math.ceil(need / memory_gb - 1e-9))


def rightsize(workload_id: str, spec: ResourceSpec, recs: Sequence[UtilRec]) -> Recommendation | None:
    """A recommendation from the workload's GPU utilization records (GPU only: CPU and memory are not in the
    stored telemetry, so their requests stay); the other listed SKUs are the candidates. None without records.

    One sample per bucket start: the records of a bucket (one per pool, tier or source the workload held GPUs in)
    are added up, their busy GPUs (``gpus x util`` of the measured ones) over the spec's GPUs; a bucket none of whose
    records was measured is NaN (not a sample). A bucket's GPU memory (one replica's) is the largest of its records',
    NaN unless every record holding GPUs measured it (an unmeasured pool's replicas may hold more); with no bucket
    measured, ``recommend`` keeps the replica's current GPU memory."""
    if not recs:
        return None
    busy: dict[int, float] = {}
    gmem: dict[int, float] = {}
    for r in sorted(recs, key=lambda r: r.start_s):
        b = busy.setdefault(r.start_s, math.nan)
        if not math.isnan(r.util):  # measured
            busy[r.start_s] = r.util * r.gpus if math.isnan(b) else b + r.util * r.gpus
        if r.gpus > 0:  # one unmeasured record makes the bucket's memory unmeasured
            m = gmem.get(r.start_s, r.gpu_mem_gb)
            gmem[r.start_s] = math.nan if math.isnan(m) or math.isnan(r.gpu_mem_gb) else max(m, r.gpu_mem_gb)
    util = np.array([b / max(spec.gpus, 1) for b in busy.values()], dtype=np.float64)
    mem = np.array([gmem.get(t, math.nan) for t in busy], dtype=np.float64)
    nan = np.full(len(util), np.nan)
    cands = tuple(s for s in SKU_CANDIDATES if s != spec.sku_id)
    return recommend(workload_id, spec, UsageProfile(nan, nan, np.clip(util, 0, 1), mem), candidate_skus=cands)


def change_spec(
    spec: ResourceSpec, change: RightsizingChange, target: ChangeStatus, *, at_s: int, actor: str, reason: str
) -> ResourceSpec:
    """Move ``change`` to ``target`` through its transition table; the workload's spec after it: the change's
    spec when applied, the one before it when rolled back, ``spec`` unchanged otherwise (a cancel)."""
    if target is ChangeStatus.APPLIED:
        return apply_change(spec, change, at_s=at_s, actor=actor)
    if target is ChangeStatus.ROLLED_BACK:
        return rollback_change(spec, change, at_s=at_s, actor=actor, reason=reason)
    change.transition(target, at_s=at_s, actor=actor, reason=reason)
    return spec
