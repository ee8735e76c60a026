"""Idle-allocated GPUs: sustained near-zero use is found; the action depends on the priority tier and kind."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.cost.idle import IdleAction, IdlePolicy, detect_idle
from gpufleet.cost.model import AllocationSpan, UsageColumns, gpu_parts
from gpufleet.domain.workloads import Priority, ServingScaling, Workload, WorkloadKind

STEP = 300
N = 48  # 4 hours of 5-minute buckets


def _w(wid: str, kind: WorkloadKind, prio: Priority, ckpt: int | None = None) -> Workload:
    scaling = ServingScaling(1, 8, 10.0) if kind is WorkloadKind.SERVING else None
    return Workload(wid, wid, kind, "team", "tenant", prio, ("h100_80gb",), 1, checkpoint_interval_s=ckpt,
                    scaling=scaling)  # fmt: skip


WORKLOADS = {
    "train-ckpt": _w("train-ckpt", WorkloadKind.TRAINING, Priority.NORMAL, 1800),
    "train-nockpt": _w("train-nockpt", WorkloadKind.TRAINING, Priority.NORMAL),
    "serve-critical": _w("serve-critical", WorkloadKind.SERVING, Priority.CRITICAL),
    "serve-normal": _w("serve-normal", WorkloadKind.SERVING, Priority.NORMAL),
    "busy": _w("busy", WorkloadKind.TRAINING, Priority.NORMAL, 1800),
    "short-idle": _w("short-idle", WorkloadKind.TRAINING, Priority.NORMAL, 1800),
    "no-telemetry": _w("no-telemetry", WorkloadKind.TRAINING, Priority.NORMAL, 1800),
}
ALLOCS = [
    AllocationSpan(f"a-{w}", w, "team", "tenant", "ns", "f", "pool", "h100_80gb", gpu_parts(8), 0, N * STEP)
    for w in WORKLOADS
]


def _usage() -> UsageColumns:
    rng = np.random.default_rng(7)
    series = {
        0: np.r_[np.full(12, 0.9), np.full(36, 0.01)],  # busy, then idle for 3 h
        1: np.r_[np.full(12, 0.9), np.full(36, 0.0)],
        2: np.full(N, 0.02),
        3: np.full(N, 0.02),
        4: rng.uniform(0.6, 1.0, N),
        5: np.r_[np.full(40, 0.9), np.full(8, 0.0)],  # idle only 40 minutes
        6: np.r_[np.full(12, 0.9), np.full(36, 0.0)],
    }
    b, a, u = [], [], []
    for j, s in series.items():
        idx = np.arange(N)
        if j == 6:
            idx = idx[: 12 + 6]  # telemetry stops: the silent part is not evidence of idleness
            s = s[: 12 + 6]
        b.append(idx)
        a.append(np.full(len(idx), j))
        u.append(s)
    return UsageColumns(0, STEP, np.concatenate(b).astype(np.int32), np.concatenate(a).astype(np.int32),
                        np.concatenate(u).astype(np.float32))  # fmt: skip


def test_idle_findings_gate_actions_by_tier_and_kind() -> None:
    found = detect_idle(_usage(), ALLOCS, WORKLOADS, now_s=N * STEP, replicas={"serve-normal": 3},
                        price_uusd_by_pool={"pool": 6_880_000})  # fmt: skip
    by = {f.workload_id: f for f in found}
    assert set(by) == {"train-ckpt", "train-nockpt", "serve-critical", "serve-normal"}
    assert (by["train-ckpt"].action, by["train-ckpt"].reason) == (
        IdleAction.CHECKPOINT_AND_PREEMPT, "idle_training_checkpointable")  # fmt: skip
    assert by["train-ckpt"].idle_s == 36 * STEP and by["train-ckpt"].idle_gpu_h == 24.0
    assert by["train-ckpt"].wasted_units == 6_880_000 * 8 * 36 * STEP
    assert by["train-nockpt"].action is IdleAction.NOTIFY
    assert (by["serve-critical"].action, by["serve-critical"].reason) == (
        IdleAction.NOTIFY, "latency_sensitive_tier_not_reclaimed")  # fmt: skip
    assert by["serve-normal"].action is IdleAction.SCALE_DOWN


def test_a_longer_sustain_window_finds_fewer() -> None:
    found = detect_idle(_usage(), ALLOCS, WORKLOADS, now_s=N * STEP, policy=IdlePolicy(sustained_s=4 * 3600))
    assert {f.workload_id for f in found} == {"serve-critical", "serve-normal"}


def test_findings_do_not_depend_on_how_many_passes_bound_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = detect_idle(_usage(), ALLOCS, WORKLOADS, now_s=N * STEP)
    monkeypatch.setattr("gpufleet.cost.idle.MATRIX_CELLS", 2 * N)  # two allocations per pass
    monkeypatch.setattr("gpufleet.cost.idle.CHUNK", 50)
    assert detect_idle(_usage(), ALLOCS, WORKLOADS, now_s=N * STEP) == whole


def test_samples_whose_utilization_was_not_measured_are_missing_not_idle() -> None:
    """NaN samples (the store's records without a measured utilization) are no idle evidence: a run made of them is
    not judged, and the ones inside an idle run count against its coverage and not in its mean."""
    base = _usage()
    nan_all = np.where(base.alloc_idx == 1, np.nan, base.util).astype(np.float32)  # train-nockpt: none measured
    found = detect_idle(UsageColumns(0, STEP, base.bucket_idx, base.alloc_idx, nan_all), ALLOCS, WORKLOADS,
                        now_s=N * STEP)  # fmt: skip
    assert "train-nockpt" not in {f.workload_id for f in found} and "train-ckpt" in {f.workload_id for f in found}
    # train-ckpt: 36 idle buckets; a third of them not measured leaves 24 of 36 measured, below 0.8 coverage
    gaps = (base.alloc_idx == 0) & (base.bucket_idx >= 12) & (base.bucket_idx % 3 == 0)
    third = np.where(gaps, np.nan, base.util).astype(np.float32)
    found = detect_idle(UsageColumns(0, STEP, base.bucket_idx, base.alloc_idx, third), ALLOCS, WORKLOADS,
                        now_s=N * STEP)  # fmt: skip
    assert "train-ckpt" not in {f.workload_id for f in found}
    # a few (3 of 36) not measured: still idle, the mean over the measured samples
    few = (base.alloc_idx == 0) & np.isin(base.bucket_idx, [20, 30, 40])
    sparse = np.where(few, np.nan, base.util).astype(np.float32)
    by = {f.workload_id: f for f in detect_idle(UsageColumns(0, STEP, base.bucket_idx, base.alloc_idx, sparse),
                                                ALLOCS, WORKLOADS, now_s=N * STEP)}  # fmt: skip
    assert by["train-ckpt"].idle_s == 36 * STEP and by["train-ckpt"].mean_util == pytest.approx(0.01)
