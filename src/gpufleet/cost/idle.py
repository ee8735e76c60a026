"""Idle-allocated GPU detection: who holds GPUs at near-zero utilization for a sustained window.

A finding is a decision as data: the action (notify, scale_down, checkpoint_and_preempt) and the reason code.
The priority tier gates the action: latency-sensitive serving (CRITICAL by default) is never reclaimed just for low
utilization (its idle may be headroom for a burst), it is only reported. Missing telemetry never counts as idle:
the idle run needs ``min_coverage`` of its buckets to have samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, UsageColumns
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import Priority, Workload, WorkloadKind


class IdleAction(StrEnum):
    NOTIFY = "notify"
    SCALE_DOWN = "scale_down"
    CHECKPOINT_AND_PREEMPT = "checkpoint_and_preempt"


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """util_threshold: below this mean activity a bucket is idle (0.05 = 5 %, DCGM noise on an idle GPU is ~0-2 %).
    sustained_s: an idle run must last this long (1 h: longer than a data-loader stall or an eval pause).
    min_coverage: fraction of the run's buckets that must have samples (missing telemetry is not idleness).
    protected_priority: at or above this tier serving is only reported, never reclaimed for low utilization.
    """

    util_threshold: float = 0.05
    sustained_s: int = 3600
    min_coverage: float = 0.8
    protected_priority: Priority = Priority.CRITICAL


@dataclass(frozen=True, slots=True)
class IdleFinding:
    allocation_id: str
    workload_id: str
    team_id: str
    idle_since_s: int
    idle_s: int
    idle_gpu_h: float
    mean_util: float
    wasted_units: int
    action: IdleAction
    reason: str


def _action(w: Workload, replicas: int | None, policy: IdlePolicy) -> tuple[IdleAction, str]:
    if w.kind is WorkloadKind.SERVING:
        if w.priority >= policy.protected_priority:
            return IdleAction.NOTIFY, "latency_sensitive_tier_not_reclaimed"
        min_r = w.scaling.min_replicas if w.scaling else 1
        if replicas is not None and replicas > min_r:
            return IdleAction.SCALE_DOWN, "idle_serving_above_min_replicas"
        return IdleAction.NOTIFY, "idle_serving_at_min_replicas"
    if w.priority >= policy.protected_priority:
        return IdleAction.NOTIFY, "protected_priority_not_reclaimed"
    if w.checkpointable:
        return IdleAction.CHECKPOINT_AND_PREEMPT, "idle_training_checkpointable"
    return IdleAction.NOTIFY, "idle_training_not_checkpointable"


def detect_idle(
    usage: UsageColumns,
    allocations: Sequence[AllocationSpan],
    workloads: Mapping[str, Workload],
    now_s: int,
    policy: IdlePolicy | None = None,
    *,
    price_uusd_by_pool: Mapping[str, int] | None = None,
    replicas: Mapping[str, int] | None = None,
) -> list[IdleFinding]:
    """Find allocations whose most recent samples are a sustained idle run ending at ``now_s``.

    ``usage.alloc_idx`` indexes ``allocations``. Only allocations with a sample in the last two buckets before
    ``now_s`` are judged (stale telemetry says nothing about now). Findings are sorted by waste, largest first.
    """
    pol = policy or IdlePolicy()
    n = len(allocations)
    if n == 0 or len(usage) == 0:
        return []
    if int(usage.alloc_idx.max()) >= n:
        raise ValidationError("usage.alloc_idx", f"refers to allocation >= {n}")
    held = usage.alloc_idx >= 0  # devices nobody holds are idle capacity, not idle allocations
    a_idx = usage.alloc_idx[held].astype(np.int64)
    b_idx = usage.bucket_idx[held].astype(np.int64)
    raw = usage.util[held]
    util = np.nan_to_num(raw.astype(np.float64), nan=0.0)
    last_seen = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last_seen, a_idx, b_idx)
    first_seen = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_seen, a_idx, b_idx)
    busy = ~np.isnan(raw) & (raw >= pol.util_threshold)
    last_busy = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last_busy, a_idx[busy], b_idx[busy])
    run_start = np.where(last_busy >= 0, last_busy + 1, first_seen)
    in_run = b_idx >= run_start[a_idx]
    run_samples = np.bincount(a_idx[in_run], minlength=n)
    run_util = np.bincount(a_idx[in_run], weights=util[in_run], minlength=n)
    now_bucket = (now_s - usage.origin_s) // usage.bucket_s

    out: list[IdleFinding] = []
    for j in np.flatnonzero((last_seen >= now_bucket - 2) & (last_seen >= run_start)):
        a = allocations[int(j)]
        run_buckets = int(last_seen[j] - run_start[j] + 1)
        idle_s = run_buckets * usage.bucket_s
        if idle_s < pol.sustained_s or run_samples[j] < pol.min_coverage * run_buckets:
            continue
        w = workloads.get(a.workload_id)
        if w is None:
            raise ValidationError(f"allocation[{a.id}].workload_id", f"unknown workload {a.workload_id!r}")
        action, reason = _action(w, (replicas or {}).get(a.workload_id), pol)
        price = (price_uusd_by_pool or {}).get(a.pool_id, 0)
        out.append(
            IdleFinding(
                allocation_id=a.id,
                workload_id=a.workload_id,
                team_id=a.team_id,
                idle_since_s=usage.origin_s + int(run_start[j]) * usage.bucket_s,
                idle_s=idle_s,
                idle_gpu_h=a.parts * idle_s / PARTS_PER_GPU / 3600,
                mean_util=float(run_util[j] / run_samples[j]),
                wasted_units=price * a.parts * idle_s // PARTS_PER_GPU,
                action=action,
                reason=reason,
            )
        )
    out.sort(key=lambda f: (-f.idle_gpu_h, f.allocation_id))
    return out
