"""Telemetry as data: GPU utilization samples in columns, whichever adapter read them.

Both telemetry adapters (Prometheus ``query_range`` and CSV/JSON uploads) return a :class:`TelemetryBatch`; it is
turned into :class:`~gpufleet.cost.model.UsageColumns` for metering by :func:`to_usage_columns`. Values are
normalized to 0..1 whatever the metric's native scale (``DCGM_FI_DEV_GPU_UTIL`` is a percentage,
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` a ratio).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.cost.model import AllocationSpan, UsageColumns
from gpufleet.domain.errors import ValidationError

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_FB_USED = "DCGM_FI_DEV_FB_USED"  # framebuffer (GPU memory) used, MiB: not a ratio, read apart (GB per pod)
SCALE_TO_RATIO: dict[str, float] = {GPU_UTIL: 0.01, GR_ENGINE_ACTIVE: 1.0}
MAX_BUCKET_S = 366 * 86_400  # a telemetry bucket of more than a year is a typo


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """One device's series: ``device`` is host/gpu (and /MIG instance) so two pods never share a series."""

    metric: str
    namespace: str
    pod: str
    device: str
    labels: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class GpuSample:
    t_s: int
    metric: str
    namespace: str
    pod: str
    device: str
    util: float


@dataclass(frozen=True, slots=True)
class TelemetryBatch:
    """Samples in columns: sample i belongs to ``series[series_idx[i]]`` at ``t_s[i]`` with ``util[i]`` (0..1, NaN:
    not measured)."""

    series: tuple[SeriesKey, ...]
    series_idx: npt.NDArray[np.int32]
    t_s: npt.NDArray[np.int64]
    util: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.util)

    def records(self) -> Iterator[GpuSample]:
        for i, t, u in zip(self.series_idx.tolist(), self.t_s.tolist(), self.util.tolist(), strict=True):
            k = self.series[i]
            yield GpuSample(t, k.metric, k.namespace, k.pod, k.device, u)

    def sorted(self) -> TelemetryBatch:
        """Canonical order (by series key, then time) so two adapters reading the same data compare equal."""
        keys = [(k.metric, k.namespace, k.pod, k.device) for k in self.series]
        order_series = sorted(range(len(keys)), key=keys.__getitem__)
        remap = np.empty(len(self.series), dtype=np.int32)
        remap[np.asarray(order_series, dtype=np.int64)] = np.arange(len(self.series), dtype=np.int32)
        sidx = remap[self.series_idx] if len(self.series) else self.series_idx
        order = np.lexsort((self.t_s, sidx))
        return TelemetryBatch(
            tuple(self.series[i] for i in order_series), sidx[order], self.t_s[order], self.util[order]
        )


def normalize(metric: str, value: float) -> float:
    """A sample on the metric's native scale to a 0..1 ratio (unknown metrics are taken as ratios)."""
    return value * SCALE_TO_RATIO.get(metric, 1.0)


class BatchBuilder:
    """Accumulates samples series by series; used by adapters to build a :class:`TelemetryBatch`."""

    def __init__(self) -> None:
        self._index: dict[SeriesKey, int] = {}
        self._sidx: list[npt.NDArray[np.int32]] = []
        self._t: list[npt.NDArray[np.int64]] = []
        self._u: list[npt.NDArray[np.float64]] = []

    def add(self, key: SeriesKey, t_s: npt.NDArray[np.int64], raw: npt.NDArray[np.float64]) -> None:
        i = self._index.setdefault(key, len(self._index))
        self._sidx.append(np.full(len(t_s), i, dtype=np.int32))
        self._t.append(t_s.astype(np.int64))
        ratio = raw.astype(np.float64) * SCALE_TO_RATIO.get(key.metric, 1.0)
        # a sample beyond 0..1 is a telemetry fault: clipped here, per sample, so one garbled scrape (1e6 %) cannot
        # decide a bucket's mean; an infinite one is no measurement (NaN, as a missing one: +Inf and -Inf averaged
        # were NaN and left the whole bucket unmeasured)
        self._u.append(np.where(np.isinf(ratio), np.nan, np.clip(ratio, 0.0, 1.0)))

    def build(self) -> TelemetryBatch:
        if not self._t:
            return TelemetryBatch((), np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.float64))
        return TelemetryBatch(
            tuple(self._index), np.concatenate(self._sidx), np.concatenate(self._t), np.concatenate(self._u)
        )


def to_usage_columns(
    batch: TelemetryBatch,
    alloc_by_pod: Mapping[tuple[str, str], int | Sequence[int]],
    origin_s: int,
    bucket_s: int,
    allocations: Sequence[AllocationSpan] | None = None,
) -> tuple[UsageColumns, int]:
    """Average each device series per bucket and attribute it to the allocation of its (namespace, pod).

    ``alloc_by_pod`` gives a pod's allocation index, or its indexes when it ran more than once. With
    ``allocations`` (the spans those indexes point into), each sample goes to the pod's allocation whose
    [start_s, end_s) holds the sample's time, and a sample outside all of them matches none; without them, to the
    pod's last allocation. Returns the usage (one sample per device, allocation and bucket) and how many samples
    matched no allocation (they are reported, not silently charged to anyone). Samples before ``origin_s`` are
    dropped.
    """
    if not 0 < bucket_s <= MAX_BUCKET_S:
        raise ValidationError("bucket_s", f"must be in 1..{MAX_BUCKET_S} seconds (a year), got {bucket_s}")
    cands = [alloc_by_pod.get((k.namespace, k.pod), ()) for k in batch.series]
    cands_of = [[c] if isinstance(c, int) else list(c) for c in cands]
    if len(batch) == 0:
        empty = UsageColumns(origin_s, bucket_s, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32))
        return empty, 0
    alloc = _sample_allocation(batch, cands_of, allocations)
    ok = (alloc >= 0) & (batch.t_s >= origin_s) & ~np.isnan(batch.util)
    unmatched = int(np.sum((alloc < 0) & (batch.t_s >= origin_s)))
    ok &= (batch.t_s - origin_s) // bucket_s <= np.iinfo(np.int32).max  # bucket indexes are int32: no wrap-around
    s, a, u = batch.series_idx[ok], alloc[ok], batch.util[ok]
    bucket = (batch.t_s[ok] - origin_s) // bucket_s
    order = np.lexsort((bucket, a, s))  # group the samples by (series, allocation, bucket)
    s, a, u, bucket = s[order], a[order], u[order], bucket[order]
    new = np.ones(len(s), dtype=bool)
    new[1:] = (s[1:] != s[:-1]) | (a[1:] != a[:-1]) | (bucket[1:] != bucket[:-1])
    group = np.cumsum(new) - 1
    mean = np.bincount(group, weights=u) / np.bincount(group) if len(group) else np.zeros(0)
    first = np.flatnonzero(new)
    cols = UsageColumns(
        origin_s, bucket_s, bucket[first].astype(np.int32), a[first].astype(np.int32), mean.astype(np.float32)
    )
    return cols, unmatched


def _sample_allocation(
    batch: TelemetryBatch, cands_of: list[list[int]], allocations: Sequence[AllocationSpan] | None
) -> npt.NDArray[np.int64]:
    """The allocation index of every sample (-1: none), from its series' candidates (see to_usage_columns)."""
    if allocations is None:
        last = np.array([c[-1] if c else -1 for c in cands_of], dtype=np.int64)
        return last[batch.series_idx] if len(cands_of) else np.full(len(batch), -1, dtype=np.int64)
    alloc = np.full(len(batch), -1, dtype=np.int64)
    order = np.lexsort((batch.t_s, batch.series_idx))  # by series, then time
    t_sorted = batch.t_s[order]
    bounds = np.searchsorted(batch.series_idx[order], np.arange(len(cands_of) + 1))
    for sid, cands in enumerate(cands_of):
        lo, hi = int(bounds[sid]), int(bounds[sid + 1])
        for j in cands:  # in file order: where two spans of one pod overlap, the later one wins
            a, b = np.searchsorted(t_sorted[lo:hi], [allocations[j].start_s, allocations[j].end_s])
            alloc[order[lo + a : lo + b]] = j
    return alloc
