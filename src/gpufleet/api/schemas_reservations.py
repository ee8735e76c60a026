"""Schemas of the reservation routes (``/v1/reservations``): a reservation requested, approved or rejected, as
stored, and the reconciler's pass over them. Request bodies forbid unknown fields."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gpufleet.api.schemas import Strict
from gpufleet.api.types import Id, SkuId, UsdOut

MAX_RESERVATION_UNITS = 100_000  # = service.approval_rules.MAX_UNITS


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
