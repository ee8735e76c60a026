"""Schemas of the fleet routes: capacity forecast, utilization, placement steps, bin-packing, the clusters' feeds,
utilization ingest and the audit log. Request bodies forbid unknown fields."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from gpufleet.api.schemas import Strict
from gpufleet.api.types import Fraction, Id, NonNegFloat, PoolId, Seconds, SkuId, UsdOut


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
