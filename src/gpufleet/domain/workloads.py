"""Workloads: training jobs and serving fleets, and the teams and tenants that own them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum


class WorkloadKind(StrEnum):
    TRAINING = "training"
    SERVING = "serving"


class Priority(IntEnum):
    """Priority tiers; higher preempts lower. Serving is never preempted for training."""

    LOW = 0  # opportunistic experiments
    NORMAL = 1
    HIGH = 2  # planned runs with deadlines
    CRITICAL = 3  # latency-sensitive production serving

    @classmethod
    def parse(cls, name: str) -> Priority:
        return cls[name.upper()]


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    name: str
    team_id: str


@dataclass(frozen=True, slots=True)
class ServingScaling:
    """How a serving fleet scales on request rate.

    target_rps_per_replica: request rate one replica sustains at the latency SLO.
    cold_start_s: time from scheduling a replica to serving (weights, compile, graph capture).
    """

    min_replicas: int
    max_replicas: int
    target_rps_per_replica: float
    cold_start_s: int = 210
    scale_down_delay_s: int = 300
    budget_usd_day: float | None = None


@dataclass(frozen=True, slots=True)
class DegradeOption:
    """A smaller configuration the workload accepts when its pool is exhausted."""

    gpus_per_replica: int | None = None
    sku_id: str | None = None
    min_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """A training job or a serving fleet.

    For training: ``gpus_per_replica`` is GPUs per worker and ``gang_size`` the number of workers that
    must start together (all or nothing). For serving: a replica is the unit of scaling.
    """

    id: str
    name: str
    kind: WorkloadKind
    team_id: str
    tenant_id: str
    priority: Priority
    acceptable_skus: tuple[str, ...]
    gpus_per_replica: int
    gang_size: int = 1
    checkpoint_interval_s: int | None = None
    scaling: ServingScaling | None = None
    deadline_s: int | None = None
    degrade_options: tuple[DegradeOption, ...] = field(default_factory=tuple)

    @property
    def checkpointable(self) -> bool:
        return self.kind is WorkloadKind.TRAINING and self.checkpoint_interval_s is not None

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_replica * self.gang_size


def lost_work_s(run_s: int, checkpoint_interval_s: int | None) -> int:
    """Work lost when a job that has run ``run_s`` seconds since (re)start is interrupted.

    A checkpointed job loses only the time since its last checkpoint (< one interval); a job without
    checkpoints loses everything since it started.
    """
    if run_s <= 0:
        return 0
    if checkpoint_interval_s is None or checkpoint_interval_s <= 0:
        return run_s
    return run_s % checkpoint_interval_s
