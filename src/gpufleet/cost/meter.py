"""Columnar metering: GPU-seconds used per allocation from millions of utilization samples.

One pass of ``np.bincount`` per chunk: no Python loop touches a sample. Chunks bound the temporary float64
copies so 86 M samples meter in well under a second of arithmetic per column (see docs/benchmarks/cost.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.cost.model import PARTS_PER_GPU, UsageColumns
from gpufleet.domain.errors import ValidationError

CHUNK = 1 << 23  # samples per bincount pass (64 MB of float64 weights)


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Per-allocation sums over a window. ``used_gpu_s`` = sum(util * bucket_s) * parts / 840."""

    samples: npt.NDArray[np.int64]
    util_sum: npt.NDArray[np.float64]
    used_gpu_s: npt.NDArray[np.float64]
    sampled_gpu_s: npt.NDArray[np.float64]  # GPU-seconds covered by samples (allocated time with telemetry)
    unattributed_samples: int = 0  # samples of devices no allocation held (alloc_idx == -1)
    unattributed_util_sum: float = 0.0  # their utilization: busy GPUs nobody pays for are worth a look

    @property
    def mean_util(self) -> npt.NDArray[np.float64]:
        """Mean utilization per allocation over its samples (NaN where none)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.samples > 0, self.util_sum / np.maximum(self.samples, 1), np.nan)


def _bucket_range(usage: UsageColumns, t0_s: int | None, t1_s: int | None) -> tuple[int | None, int | None]:
    """Bucket indexes whose start lies in [t0_s, t1_s)."""
    lo = None if t0_s is None else -((usage.origin_s - t0_s) // usage.bucket_s)  # ceil division
    hi = None if t1_s is None else -((usage.origin_s - t1_s) // usage.bucket_s)
    return lo, hi


def meter_usage(
    usage: UsageColumns,
    parts: npt.NDArray[np.int64],
    t0_s: int | None = None,
    t1_s: int | None = None,
) -> UsageTotals:
    """Sum utilization per allocation over the buckets that start in [t0_s, t1_s) (None = unbounded). A bucket that
    ends after ``t1_s`` counts only its seconds before ``t1_s`` in ``used_gpu_s`` and ``sampled_gpu_s``, so a window
    shorter than a bucket is never credited with more GPU-seconds than it has.

    ``parts[j]`` is the share one sample of allocation j stands for, in parts (840 = one GPU): the whole allocation
    when telemetry is per allocation, one device (840, or a MIG slice's parts) when it is per GPU.
    Samples with util outside [0, 1] or NaN are a telemetry fault: NaN is skipped, values are clipped to [0, 1].
    """
    n_alloc = len(parts)
    if len(usage) and (int(usage.alloc_idx.max()) >= n_alloc or int(usage.alloc_idx.min()) < -1):
        raise ValidationError("usage.alloc_idx", f"must be in [-1, {n_alloc})")
    lo, hi = _bucket_range(usage, t0_s, t1_s)
    cut: tuple[int, float] | None = None  # the last bucket when t1_s cuts it: its index, the share after t1_s
    if t1_s is not None and hi is not None:
        inside_s = t1_s - (usage.origin_s + (hi - 1) * usage.bucket_s)
        if inside_s < usage.bucket_s:
            cut = (hi - 1, 1.0 - inside_s / usage.bucket_s)
    # bin 0 collects alloc_idx == -1 (unattributed devices); allocation j is bin j + 1
    counts = np.zeros(n_alloc + 1, dtype=np.int64)
    sums = np.zeros(n_alloc + 1, dtype=np.float64)
    cut_counts = np.zeros(n_alloc + 1, dtype=np.int64)  # samples in the cut bucket, and their utilization
    cut_sums = np.zeros(n_alloc + 1, dtype=np.float64)
    for start in range(0, len(usage), CHUNK):
        sl = slice(start, start + CHUNK)
        a = usage.alloc_idx[sl]
        u = usage.util[sl]
        mask: npt.NDArray[np.bool_] | None = None
        if lo is not None or hi is not None:
            b = usage.bucket_idx[sl]
            mask = np.ones(len(b), dtype=bool)
            if lo is not None:
                mask &= b >= lo
            if hi is not None:
                mask &= b < hi
        bad = np.isnan(u)
        if bad.any():
            mask = ~bad if mask is None else mask & ~bad
        if cut is not None:
            in_cut = usage.bucket_idx[sl] == cut[0]
            if mask is not None:
                in_cut = in_cut[mask]
        if mask is not None:
            a, u = a[mask], u[mask]
        a1 = a + np.int32(1)
        u = np.clip(u, 0.0, 1.0)
        counts += np.bincount(a1, minlength=n_alloc + 1)
        sums += np.bincount(a1, weights=u, minlength=n_alloc + 1)
        if cut is not None:
            cut_counts += np.bincount(a1[in_cut], minlength=n_alloc + 1)
            cut_sums += np.bincount(a1[in_cut], weights=u[in_cut], minlength=n_alloc + 1)
    gpus = parts.astype(np.float64) / PARTS_PER_GPU
    lost = 0.0 if cut is None else cut[1]
    return UsageTotals(
        samples=counts[1:],
        util_sum=sums[1:],
        used_gpu_s=(sums[1:] - lost * cut_sums[1:]) * usage.bucket_s * gpus,
        sampled_gpu_s=(counts[1:] - lost * cut_counts[1:]) * usage.bucket_s * gpus,
        unattributed_samples=int(counts[0]),
        unattributed_util_sum=float(sums[0]),
    )


def group_sum(values: npt.NDArray[np.float64], keys: list[str]) -> dict[str, float]:
    """Sum per-allocation ``values`` by a label (``keys[j]`` is allocation j's label)."""
    uniq, codes = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    sums = np.bincount(codes, weights=values, minlength=len(uniq))
    return {str(k): float(v) for k, v in zip(uniq, sums, strict=True)}
