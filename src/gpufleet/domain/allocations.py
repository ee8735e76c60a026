"""Allocations and utilization records."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.domain.pools import Tier


@dataclass(frozen=True, slots=True)
class FallbackStep:
    """One link of a fallback chain: where to go next and what triggers it."""

    pool_id: str | None  # None = queue
    tier: Tier | None
    trigger: str  # reason code, e.g. "quota_exhausted", "stockout", "not_checkpointable"
    option: int | None = None  # the degrade option (index in the workload's) tried here; None: the request as asked


@dataclass(frozen=True, slots=True)
class Allocation:
    """A workload bound to a pool, with the chain it fell through to get there."""

    workload_id: str
    pool_id: str | None
    tier: Tier | None
    gpus: int
    reason: str
    fallback: tuple[FallbackStep, ...] = field(default_factory=tuple)

    @property
    def queued(self) -> bool:
        return self.pool_id is None


@dataclass(frozen=True, slots=True)
class UtilizationRecord:
    """Measured use of GPUs by one workload over one time bucket.

    Idempotency key: (source, bucket_start_s, workload_id).
    """

    source: str
    bucket_start_s: int
    bucket_s: int
    workload_id: str
    team_id: str
    sku_id: str
    gpus_allocated: float
    gpu_util: float | None  # 0..1, mean SM activity of the allocated GPUs; None: not measured

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.source, self.bucket_start_s, self.workload_id)
