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
import numpy.typing as npt

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


MATRIX_CELLS = 200_000_000  # allocation x bucket cells per pass (200 MB per boolean matrix)
CHUNK = 1 << 23


def _trailing_idle_runs(
    usage: UsageColumns, n: int, threshold: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
           npt.NDArray[np.float64]]:  # fmt: skip
    """Per allocation: last bucket seen, start of the trailing idle run, buckets with samples in the run, samples
    in the run and their utilization sum. Columnar: boolean allocation x bucket matrices, built by scatter, in as
    many passes over allocation ranges as needed to bound memory (``ufunc.at`` was 10x slower at 86 M samples)."""
    b_min = int(usage.bucket_idx.min())
    n_b = int(usage.bucket_idx.max()) - b_min + 1
    last_seen = np.full(n, -1, dtype=np.int64)
    run_start = np.zeros(n, dtype=np.int64)
    run_present = np.zeros(n, dtype=np.int64)
    rows = max(1, MATRIX_CELLS // n_b)
    cols = np.arange(n_b, dtype=np.int64)
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        present = np.zeros((hi - lo) * n_b, dtype=bool)
        busy = np.zeros((hi - lo) * n_b, dtype=bool)
        for start in range(0, len(usage), CHUNK):
            a = usage.alloc_idx[start : start + CHUNK]
            keep = (a >= lo) & (a < hi)
            flat = (a[keep].astype(np.int64) - lo) * n_b + (usage.bucket_idx[start : start + CHUNK][keep] - b_min)
            u = usage.util[start : start + CHUNK][keep]
            present[flat[~np.isnan(u)]] = True  # a NaN sample (not measured) is missing: never idle evidence
            busy[flat[u >= threshold]] = True  # NaN compares False: missing is never busy either
        pm = present.reshape(hi - lo, n_b)
        bm = busy.reshape(hi - lo, n_b)
        seen = pm.any(axis=1)
        last = n_b - 1 - np.argmax(pm[:, ::-1], axis=1)
        first = np.argmax(pm, axis=1)
        last_busy = np.where(bm.any(axis=1), n_b - 1 - np.argmax(bm[:, ::-1], axis=1), -1)
        rs = np.where(last_busy >= 0, last_busy + 1, first)
        last_seen[lo:hi] = np.where(seen, last + b_min, -1)
        run_start[lo:hi] = rs + b_min
        run_present[lo:hi] = (pm & (cols[None, :] >= rs[:, None])).sum(axis=1)
    run_samples = np.zeros(n, dtype=np.int64)
    run_util = np.zeros(n, dtype=np.float64)
    for start in range(0, len(usage), CHUNK):
        a = usage.alloc_idx[start : start + CHUNK]
        keep = a >= 0
        a = a[keep]
        u = usage.util[start : start + CHUNK][keep]
        in_run = (usage.bucket_idx[start : start + CHUNK][keep] >= run_start[a]) & ~np.isnan(u)
        run_samples += np.bincount(a[in_run], minlength=n)
        run_util += np.bincount(a[in_run], weights=u[in_run], minlength=n)
    return last_seen, run_start, run_present, run_samples, run_util


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
    last_seen, run_start, run_present, run_samples, run_util = _trailing_idle_runs(usage, n, pol.util_threshold)
    now_bucket = (now_s - usage.origin_s) // usage.bucket_s

    out: list[IdleFinding] = []
    for j in np.flatnonzero((last_seen >= now_bucket - 2) & (last_seen >= run_start)):
        a = allocations[int(j)]
        run_buckets = int(last_seen[j] - run_start[j] + 1)
        idle_s = run_buckets * usage.bucket_s
        if idle_s < pol.sustained_s or run_present[j] < pol.min_coverage * run_buckets or run_samples[j] == 0:
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
