"""Schemas of the workload routes (``/v1/workloads``): the workload as registered, its autoscaling bounds, its cost
and the rightsizing recommendation applied through a change ticket. Request bodies forbid unknown fields."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from gpufleet.api.schemas import JobClass, PriorityName, Strict
from gpufleet.api.types import Id, Name, NonNegFloat, PositiveFloat, SkuId, UsdIn, UsdOut


class WorkloadCreate(Strict):
    """The orchestration design's body, as written: every field of it is accepted, and what it omits gets a
    default (one GPU, the SKU's CPU and memory per GPU, one replica, ``rps``, normal priority, the team's only
    tenant). ``gpu_sku`` may be the SKU id or a unique case-insensitive prefix of its id or name (``H100``).
    ``kind``, ``checkpoint_interval_s`` and ``target_rps`` extend it."""

    name: Name
    image: Annotated[str, Field(pattern=r"^[^\s\x00-\x1f]{1,500}$")]
    cpu: PositiveFloat | None = Field(default=None, description="Default: the SKU node's CPUs per GPU x gpus")
    mem_gb: PositiveFloat | None = Field(default=None, description="Default: the SKU node's memory per GPU x gpus")
    gpus: Annotated[int, Field(ge=0, le=64, strict=True)] = 1
    gpu_sku: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$", examples=["h100_80gb", "H100"])]
    min_replicas: Annotated[int, Field(ge=0, le=10_000, strict=True)] = 1
    max_replicas: Annotated[int, Field(ge=0, le=10_000, strict=True)] | None = Field(
        default=None, description="Default: min_replicas"
    )
    scale_metric: Annotated[str, Field(pattern=r"^[A-Za-z0-9_./:-]{1,64}$", examples=["rps"])] = "rps"
    budget_usd_day: UsdIn | None = None
    team: Id
    tenant: Id | None = Field(default=None, description="Default: the team's only tenant")
    priority: PriorityName = "normal"
    kind: JobClass = "serving"
    checkpoint_interval_s: Annotated[int, Field(gt=0, le=30 * 86400, strict=True)] | None = None
    target_rps: NonNegFloat | None = None


class WorkloadCreated(BaseModel):
    workload_id: str


class WorkloadPublic(BaseModel):
    workload_id: str
    name: str
    image: str
    kind: str
    cpu: float
    mem_gb: float
    gpus: int
    gpu_sku: str
    min_replicas: int
    max_replicas: int
    scale_metric: str
    target_rps: float | None
    slo_s: float | None = None
    max_concurrency: int | None = None
    budget_usd_day: UsdOut | None
    team: str
    tenant: str
    priority: str
    checkpoint_interval_s: int | None
    version: int
    created_at_s: int


class AutoscalingUpdate(Strict):
    min: Annotated[int, Field(ge=0, le=10_000, strict=True)]
    max: Annotated[int, Field(ge=0, le=10_000, strict=True)]
    target_rps: NonNegFloat
    slo_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] | None = Field(
        default=None,
        description="Queue-wait SLO in seconds: turns on the burst floor and the SLO error budget (unset: off).",
    )
    max_concurrency: Annotated[int, Field(ge=1, le=10_000, strict=True)] | None = Field(
        default=None,
        description="Requests one replica serves at once (1 for an un-batched model; unset: a batching replica).",
    )
    version: Annotated[int, Field(ge=1, le=2**31 - 1, strict=True)] | None = Field(
        default=None, description="Version you read; a stale one gets 409 (also accepted as If-Match)."
    )


class AutoscalingPublic(BaseModel):
    workload_id: str
    version: int


class Rightsizing(BaseModel):
    reason: str
    current_gpus: float | None
    p95_busy_gpus: float | None
    recommended_gpus: int | None = Field(
        description="p95 busy GPUs at target_util, never below memory_floor_gpus (null: nothing to size)"
    )
    target_util: float
    est_savings_usd_per_day: UsdOut
    gpu_memory: Literal["measured", "unmeasured_kept"] | None = Field(
        default=None,
        description="measured: the records carry gpu_mem_gb; unmeasured_kept: none does, so recommended_gpus keeps "
        "the replica's GPUs (null: nothing sized)",
    )
    p99_gpu_mem_gb: float | None = Field(
        default=None, description="p99 over the window's buckets of one replica's GPU memory (null: not measured)"
    )
    memory_floor_gpus: int | None = Field(
        default=None,
        description="GPUs recommended_gpus never goes below: those holding p99_gpu_mem_gb + 20 % headroom, or "
        "unmeasured the replica's GPUs (at most those held)",
    )
    recommendation: dict[str, Any] | None = Field(
        default=None, description="cost.rightsizing: current and recommended spec, reasons, monthly_saving_usd"
    )


class WorkloadCostPublic(BaseModel):
    workload_id: str
    window_s: int
    cost_usd: UsdOut
    idle_pct: float | None = Field(description="Idle share of the allocated GPU-hours as a fraction (0.75 = 75 %)")
    gpu_hours: float
    rightsizing: Rightsizing
    allocated_gpu_h: float | None = None
    used_gpu_h: float | None = None
    measured_gpu_h: float | None = Field(
        default=None, description="GPU-hours held with a measured utilization (utilization = used / measured)"
    )
    utilization: float | None = None
    direct_usd: UsdOut | None = None
    idle_usd: UsdOut | None = None
    shared_usd: UsdOut | None = None
    total_usd: UsdOut | None = None
    by_tier_usd: dict[str, UsdOut] | None = None
    idle_waste_usd: UsdOut | None = Field(
        default=None, description="held-but-unbusy GPU time at the price paid (docs/api.md: idle waste)"
    )
    price_basis: str | None = None


class RightsizingApply(Strict):
    cpu: PositiveFloat
    mem_gb: PositiveFloat
    ticket: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.#-]{0,127}$", examples=["OPS-1234"])]
    gpus: Annotated[int, Field(ge=1, le=64, strict=True)] | None = None
    gpu_sku: SkuId | None = None


class RightsizingAccepted(BaseModel):
    change_id: str
    status: str = "pending"
    ticket: str | None = None
    href: str | None = None
