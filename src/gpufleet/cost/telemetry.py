"""Telemetry as data: GPU utilization samples in columns, whichever adapter read them.

Both telemetry adapters (Prometheus ``query_range`` and CSV/JSON uploads) return a :class:`TelemetryBatch`; it is
turned into :class:`~gpufleet.cost.model.UsageColumns` for metering by :func:`to_usage_columns`. Values are
normalized to 0..1 whatever the metric's native scale (``DCGM_FI_DEV_GPU_UTIL`` is a percentage,
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` a ratio).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.cost.model import UsageColumns
from gpufleet.domain.errors import ValidationError

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SCALE_TO_RATIO: dict[str, float] = {GPU_UTIL: 0.01, GR_ENGINE_ACTIVE: 1.0}


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
    """Samples in columns: sample i belongs to ``series[series_idx[i]]`` at ``t_s[i]`` with ``util[i]`` (0..1)."""

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
        self._u.append(raw.astype(np.float64) * SCALE_TO_RATIO.get(key.metric, 1.0))

    def build(self) -> TelemetryBatch:
        if not self._t:
            return TelemetryBatch((), np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.float64))
        return TelemetryBatch(
            tuple(self._index), np.concatenate(self._sidx), np.concatenate(self._t), np.concatenate(self._u)
        )


def to_usage_columns(
    batch: TelemetryBatch, alloc_by_pod: Mapping[tuple[str, str], int], origin_s: int, bucket_s: int
) -> tuple[UsageColumns, int]:
    """Average each device series per bucket and attribute it to the allocation of its (namespace, pod).

    Returns the usage (one sample per device per bucket) and how many samples matched no allocation (they are
    reported, not silently charged to anyone). Samples before ``origin_s`` are dropped.
    """
    if bucket_s <= 0:
        raise ValidationError("bucket_s", f"must be > 0, got {bucket_s}")
    series_alloc = np.array([alloc_by_pod.get((k.namespace, k.pod), -1) for k in batch.series], dtype=np.int64)
    if len(batch) == 0:
        empty = UsageColumns(origin_s, bucket_s, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32))
        return empty, 0
    alloc = series_alloc[batch.series_idx]
    ok = (alloc >= 0) & (batch.t_s >= origin_s) & ~np.isnan(batch.util)
    unmatched = int(np.sum((alloc < 0) & (batch.t_s >= origin_s)))
    bucket = (batch.t_s[ok] - origin_s) // bucket_s
    n_buckets = int(bucket.max()) + 1 if len(bucket) else 1
    key = batch.series_idx[ok].astype(np.int64) * n_buckets + bucket
    uniq, inv = np.unique(key, return_inverse=True)
    mean = np.bincount(inv, weights=batch.util[ok]) / np.bincount(inv)
    s_of, b_of = uniq // n_buckets, uniq % n_buckets
    cols = UsageColumns(
        origin_s, bucket_s, b_of.astype(np.int32), series_alloc[s_of].astype(np.int32), mean.astype(np.float32)
    )
    return cols, unmatched
