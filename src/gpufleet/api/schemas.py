"""Request and response schemas: ``XCreate`` (what a client sends), ``XUpdate`` (partial), ``XPublic`` (what
the API returns). Request bodies forbid unknown fields, so a typo is a 422 naming the field, not a no-op."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.api.types import (
    Count,
    Fraction,
    Geo,
    Id,
    Interconnect,
    LeadTimeS,
    Name,
    NonNegFloat,
    PoolId,
    PositiveCount,
    PositiveFloat,
    Seconds,
    SkuId,
    UsdIn,
    UsdOut,
)

TierName = Literal["reserved", "on_demand", "spot", "secondary"]
PriorityName = Literal["low", "normal", "high", "critical"]
JobClass = Literal["training", "serving"]
RoleName = Literal["finops_admin", "ml_platform_admin", "app_team", "viewer"]
GpusPerNode = Annotated[int, Field(ge=1, le=64, strict=True)]
MAX_RESERVATION_UNITS = 100_000  # = service.approval_rules.MAX_UNITS


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- problems ----------------------------------------------------------------------------------------------
class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details; ``field`` names the (first) offending field."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None
    errors: list[FieldProblem] = Field(default_factory=list)


# ---- registries --------------------------------------------------------------------------------------------
class SkuCreate(Strict):
    id: SkuId
    name: Name
    memory_gb: PositiveCount
    gpus_per_node: GpusPerNode = 8
    cpu_per_node: PositiveCount
    mem_gb_per_node: PositiveCount
    interconnect: Interconnect
    relative_throughput: PositiveFloat


class SkuPublic(BaseModel):
    id: str
    name: str
    memory_gb: int
    gpus_per_node: int
    cpu_per_node: int
    mem_gb_per_node: int
    interconnect: str
    relative_throughput: float


class ProviderCreate(Strict):
    id: Id
    name: Name
    kind: Literal["hyperscaler", "neocloud", "owned"]


class ProviderPublic(BaseModel):
    id: str
    name: str
    kind: str


class RegionCreate(Strict):
    id: Id
    provider_id: Id
    geo: Geo


class RegionPublic(BaseModel):
    id: str
    provider_id: str
    geo: str


class PoolCreate(Strict):
    id: PoolId
    provider_id: Id
    region_id: Id
    sku_id: SkuId
    tier: TierName
    price_usd_per_gpu_h: UsdIn
    term_months: Annotated[int, Field(ge=0, le=60, strict=True)] = 0
    lead_time_s: LeadTimeS = 0
    quota_gpus: Count | None = None
    allocated_gpus: Count = 0
    preemption_rate_per_h: Fraction = 0.0


class PoolUpdate(Strict):
    """Partial update: quota, observed allocation and price change as the fleet moves."""

    price_usd_per_gpu_h: UsdIn | None = None
    quota_gpus: Count | None = None
    allocated_gpus: Count | None = None
    lead_time_s: LeadTimeS | None = None


class PoolPublic(BaseModel):
    id: str
    provider_id: str
    region_id: str
    sku_id: str
    tier: str
    price_usd_per_gpu_h: UsdOut
    term_months: int
    lead_time_s: int
    quota_gpus: int | None
    allocated_gpus: int
    preemption_rate_per_h: float


class ClusterCreate(Strict):
    id: Id
    name: Name
    region_id: Id


class ClusterPublic(BaseModel):
    id: str
    name: str
    region_id: str


class NodeAllocation(Strict):
    workload_id: Id
    gpus: Annotated[int, Field(ge=1, le=64, strict=True)]


Allocations = Annotated[list[NodeAllocation], Field(max_length=64)]


def _once_each(allocations: list[NodeAllocation]) -> list[NodeAllocation]:
    ids = [a.workload_id for a in allocations]
    twice = sorted({w for w in ids if ids.count(w) > 1})
    if twice:
        raise ValueError(f"each workload is allocated once; listed more than once: {', '.join(twice)}")
    return allocations


class NodeCreate(Strict):
    id: Id
    cluster_id: Id
    sku_id: SkuId
    gpus_total: GpusPerNode
    allocations: Allocations = Field(default_factory=list)

    _allocations_once = field_validator("allocations")(_once_each)

    @model_validator(mode="after")
    def _fits(self) -> NodeCreate:
        if sum(a.gpus for a in self.allocations) > self.gpus_total:
            raise ValueError("allocations exceed gpus_total")
        return self


class NodeUpdate(Strict):
    """New allocations; the service checks that they fit the node's stored ``gpus_total``."""

    allocations: Allocations

    _allocations_once = field_validator("allocations")(_once_each)


class NodePublic(BaseModel):
    id: str
    cluster_id: str
    sku_id: str
    gpus_total: int
    allocations: list[NodeAllocation]


class TeamCreate(Strict):
    id: Id
    name: Name


class TeamPublic(BaseModel):
    id: str
    name: str


class TenantCreate(Strict):
    id: Id
    name: Name
    team_id: Id


class TenantPublic(BaseModel):
    id: str
    name: str
    team_id: str


# ---- workloads ---------------------------------------------------------------------------------------------
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


# ---- reservations ------------------------------------------------------------------------------------------
PublicStatus = Literal[
    "draft",
    "pending_approval",
    "approved",
    "blocked",
    "submitted_to_cloud",
    "active",
    "expired",
    "rejected",
    "cancelled",
]


class ReservationCreate(Strict):
    sku: SkuId
    units: Annotated[int, Field(gt=0, le=MAX_RESERVATION_UNITS, strict=True, description="GPUs, at most 100,000")]
    start: datetime = Field(
        description="ISO 8601; a time without offset is UTC. Not in the past, at most ten years ahead."
    )
    term_months: Annotated[int, Field(ge=1, le=60, strict=True, description="One of 1, 3, 6, 12, 24, 36.")]
    regions: Annotated[list[Id], Field(min_length=1, max_length=20)] = Field(
        description="Several regions split the units across them, as evenly as possible (the remainder to the "
        "first); each needs a reserved pool of the SKU."
    )


class ReservationRegion(BaseModel):
    region: str
    units: int


class ApprovalPublic(BaseModel):
    user_id: str
    role: str
    at_s: int


class ReservationPublic(BaseModel):
    reservation_id: str
    status: PublicStatus
    est_cost_usd: UsdOut
    sku: str
    region: str
    pool: str
    units: int
    start_s: int
    term_months: int
    price_usd_per_gpu_h: UsdOut
    approvals_required: int
    approvals: list[ApprovalPublic]
    created_by: str
    created_at_s: int
    budget_code: str | None
    provider_order_id: str | None
    version: int
    regions: list[ReservationRegion] = Field(default_factory=list, description="Units per region (all parts)")
    parts: list[str] = Field(default_factory=list, description="Reservation ids of a multi-region group's parts")
    part_of: str | None = Field(default=None, description="The group's head (approve and decide on it)")
    status_reason: str | None = Field(
        default=None,
        description="The provider's reason for the status: the refusal a blocked reservation waits on (a permission "
        "or policy to fix; it is tried on each pass), the code that cancelled it",
    )


class ReservationApprove(Strict):
    approver_ids: Annotated[list[Id], Field(max_length=10)] = Field(
        default_factory=list,
        description="Optional; if given it must include the caller. Each approver approves with their own token.",
    )
    budget_code: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", examples=["ML-2026-Q1"])]


class ReservationDecision(Strict):
    reason: Annotated[str, Field(pattern=r"^[^\x00-\x1f]{0,500}$")] = ""


class ReconcileError(BaseModel):
    reservation_id: str
    error: str  # the provider's code and message (a refusal for the moment: a permission denied, no capacity now)


class ReconcilePublic(BaseModel):
    submitted: list[str]
    still_pending: list[str]
    activated: list[str]
    expired: list[str]
    cancelled: list[str] = []  # the provider reported the order cancelled or failed before it became active
    errors: list[ReconcileError] = []  # approved ones left approved or blocked this pass, and why (a setting, capacity)
    warnings: list[str] = []  # what a provider's answer says against gpufleet's record (an edited tag): not obeyed


# ---- fleet ---------------------------------------------------------------------------------------------------
class DemandPoint(BaseModel):
    day_start_s: int
    p10: float
    p50: float
    p90: float


class SupplyPoint(BaseModel):
    day_start_s: int
    committed_units: int
    pending_units: int
    quota_units: int
    total_units: int


class CapacityForecast(BaseModel):
    sku: str
    region: str | None = None
    days: int
    demand: list[DemandPoint]
    supply: list[SupplyPoint]
    gap_units: int
    confidence: float | None
    history_days: int
    method: str


class FleetUtilization(BaseModel):
    sku: str
    region: str | None = None
    window_s: int
    avg_util: float | None
    p95_queue_wait_sec: float | None
    idle_waste_usd: UsdOut = Field(description="idle_unbusy_usd + idle_unallocated_usd (docs/api.md: idle waste)")
    idle_unbusy_usd: UsdOut | None = Field(default=None, description="held GPUs not busy, at the price paid")
    idle_unallocated_usd: UsdOut | None = Field(default=None, description="paid capacity nobody held")
    gpu_hours: float
    util_measured_gpu_hours: float = Field(
        description="the GPU-hours whose utilization was measured (avg_util is over these; the rest is unknown)"
    )
    records: int
    price_basis: str


class PlacementStep(BaseModel):
    pool: str | None
    region: str | None
    tier: str | None
    trigger: str


class SkippedStep(PlacementStep):
    option: str | None = Field(
        default=None,
        description="The degrade option this pool was tried for (`degrade_options[i]`); null: the request as asked",
    )


class MovePublic(BaseModel):
    workload_id: str
    gpus: int
    from_node: str
    to_node: str
    cost_gpu_h: float


class SkippedNode(BaseModel):
    node: str
    reason: str


class InventoryFeed(BaseModel):
    status: str = Field(description="ok | stale (last sync older than 10 minutes) | never")
    last_synced_s: int | None
    nodes: int | None
    pods: int | None
    syncs_last_day: int


class UsageFeed(BaseModel):
    status: str = Field(description="ok | stale (last hour written started over 3 hours ago) | never")
    last_hour_s: int | None
    records_last_hour: int
    gpu_hours_last_day: float
    util_unmeasured_share_last_day: float | None = Field(
        description="the share of the day's GPU-hours whose utilization was not measured (no DCGM reading)"
    )


class ClusterFeed(BaseModel):
    cluster: str
    now_s: int
    inventory: InventoryFeed
    usage: UsageFeed


class BinpackReport(BaseModel):
    cluster: str
    nodes: int
    gpus_total: int
    gpus_used: int
    fragmentation: float
    suggested_moves: list[MovePublic]
    nodes_freed: list[str]
    skipped_nodes: list[SkippedNode]
    fragmentation_after: float


class UtilizationRecordIn(Strict):
    source: Id
    bucket_start_s: Seconds
    bucket_s: Annotated[int, Field(ge=1, le=86400, strict=True)]
    workload_id: Id
    team_id: Id
    sku_id: SkuId
    gpus_allocated: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False, strict=True)]
    gpu_util: Fraction | None = Field(
        description="The mean busy share (0..1) of the GPUs held. null: not measured (no DCGM reading); the GPUs "
        "held still count for planning and cost, and that time is neither busy nor idle in the books.",
    )
    queue_wait_s: NonNegFloat | None = None
    pool_id: PoolId | None = Field(
        default=None,
        description="The pool the GPUs ran in (its region follows): costs are charged to it. Omitted: the "
        "fallback attribution (the SKU's reservations first, then on-demand).",
    )
    gpu_mem_gb: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False, strict=True)] | None = Field(
        default=None,
        description="The most GPU memory one replica (pod) used in the bucket, summed over its GPUs, in GB (DCGM "
        "DCGM_FI_DEV_FB_USED MiB / 1024). Omitted or null: not measured; rightsizing then keeps the replica's GPU "
        "memory.",
    )


class UtilizationIngest(Strict):
    records: Annotated[list[UtilizationRecordIn], Field(max_length=10_000)]


class IngestResultPublic(BaseModel):
    received: int
    inserted: int
    updated: int


class AuditEventPublic(BaseModel):
    id: int
    at_s: int
    actor: str
    action: str
    entity: str
    entity_id: str
    detail: dict[str, Any]


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    schema_revision: str
