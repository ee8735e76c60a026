"""Request and response schemas: ``XCreate`` (what a client sends), ``XUpdate`` (partial), ``XPublic`` (what
the API returns). Request bodies forbid unknown fields, so a typo is a 422 naming the field, not a no-op.

This module holds what every API area shares (:class:`Strict`, the tier/priority/job-class names), the problem
details, the registries and the health probes; each area's own schemas live beside it: ``schemas_workloads``,
``schemas_reservations``, ``schemas_fleet``, ``schemas_plan`` (planning) and ``schemas_planned`` (planned runs)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.api.types import (
    Count,
    Fraction,
    Geo,
    Id,
    Interconnect,
    LeadTimeS,
    Name,
    PoolId,
    PositiveCount,
    PositiveFloat,
    SkuId,
    UsdIn,
    UsdOut,
)

TierName = Literal["reserved", "on_demand", "spot", "secondary"]
PriorityName = Literal["low", "normal", "high", "critical"]
JobClass = Literal["training", "serving"]
RoleName = Literal["finops_admin", "ml_platform_admin", "app_team", "viewer"]
GpusPerNode = Annotated[int, Field(ge=1, le=64, strict=True)]


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


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    schema_revision: str
