"""The cost decisions the service asks for beyond its books: idle waste (the one definition, ``cost/waste.py``),
rightsizing a workload from its measured utilization, and the rightsizing change lifecycle (one transition table,
``cost/changes.py``). Worlds reach the decision packages through control/ (the import contract in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.cost.books import UtilRec
from gpufleet.cost.changes import ChangeStatus, RightsizingChange, apply_change, rollback_change
from gpufleet.cost.rightsizing import (
    Recommendation,
    ResourceSpec,
    UsageProfile,
    bucket_gpu_memory,
    gpu_memory_floor,
    gpu_memory_percentile,
    recommend,
)
from gpufleet.cost.waste import IdleWaste, idle_waste

__all__ = [
    "SKU_CANDIDATES",
    "ChangeStatus",
    "IdleWaste",
    "Recommendation",
    "ResourceSpec",
    "RightsizingChange",
    "bucket_gpu_memory",
    "change_spec",
    "gpu_memory_floor",
    "gpu_memory_percentile",
    "idle_waste",
    "rightsize",
]

SKU_CANDIDATES = ("h100_80gb", "h200_141gb", "a100_80gb", "l40s")


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
    recs = sorted(recs, key=lambda r: r.start_s)
    start_s = np.array([r.start_s for r in recs], dtype=np.int64)
    gpus = np.array([r.gpus for r in recs], dtype=np.float64)
    util = np.array([r.util for r in recs], dtype=np.float64)
    starts, idx = np.unique(start_s, return_inverse=True)
    measured = ~np.isnan(util)
    busy = np.bincount(idx[measured], weights=(util * gpus)[measured], minlength=starts.size).astype(np.float64)
    busy[np.bincount(idx[measured], minlength=starts.size) == 0] = np.nan  # no record of the bucket measured
    mem = bucket_gpu_memory(idx, gpus, np.array([r.gpu_mem_gb for r in recs], dtype=np.float64), starts.size)
    nan = np.full(starts.size, np.nan)
    cands = tuple(s for s in SKU_CANDIDATES if s != spec.sku_id)
    share = np.clip(busy / max(spec.gpus, 1), 0, 1)
    return recommend(workload_id, spec, UsageProfile(nan, nan, share, mem), candidate_skus=cands)


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
