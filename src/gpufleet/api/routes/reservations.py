"""Reservation routes: create, read, approve (one or two approvers), reject, cancel, submit, reconcile."""

from __future__ import annotations

from datetime import UTC
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query

from gpufleet.api import seed_examples as seed
from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas_reservations import (
    ReconcilePublic,
    ReservationApprove,
    ReservationCreate,
    ReservationDecision,
    ReservationPublic,
)
from gpufleet.api.types import IDEMPOTENCY_KEY_PATTERN, IdPath, Limit, Offset
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.service.auth import ADMINS
from gpufleet.service.reservation_rows import ReservationView

router = APIRouter(prefix="/v1/reservations", tags=["reservations"], responses=PROBLEM_RESPONSES)

# The API names the provider-confirmed state as the design does; the domain calls it "submitted".
PUBLIC_STATUS = {ReservationStatus.SUBMITTED: "submitted_to_cloud"}
STATUS_FROM_PUBLIC = {v: k for k, v in PUBLIC_STATUS.items()}


def public(v: ReservationView) -> dict[str, Any]:
    return {
        "reservation_id": v.id,
        "status": PUBLIC_STATUS.get(v.status, v.status.value),
        "est_cost_usd": v.est_cost_usd,
        "sku": v.sku_id,
        "region": v.region_id,
        "pool": v.pool_id,
        "units": v.units,
        "start_s": v.start_s,
        "term_months": v.term_months,
        "price_usd_per_gpu_h": v.price_usd_per_gpu_h,
        "approvals_required": v.approvals_required,
        "approvals": [{"user_id": a.user_id, "role": a.role, "at_s": a.at_s} for a in v.approvals],
        "created_by": v.created_by,
        "created_at_s": v.created_at_s,
        "budget_code": v.budget_code,
        "provider_order_id": v.provider_order_id,
        "version": v.version,
        "regions": [{"region": r, "units": u} for r, u in v.regions],
        "parts": list(v.parts),
        "part_of": v.group_id if v.group_id not in (None, v.id) else None,
        "status_reason": v.status_reason,
    }


@router.post("", status_code=201, response_model=ReservationPublic)
def create_reservation(
    body: Annotated[ReservationCreate, Body(openapi_examples=seed.example(seed.RESERVATION))],
    services: ServicesDep,
    actor: CurrentActor,
    idempotency_key: Annotated[str | None, Header(pattern=IDEMPOTENCY_KEY_PATTERN)] = None,
) -> Any:
    """Propose a commitment. It waits in ``pending_approval`` for one approval, or two above the threshold.
    Send an ``Idempotency-Key`` header to make retries safe: the same key returns the first proposal."""
    start = body.start if body.start.tzinfo is not None else body.start.replace(tzinfo=UTC)
    view = services.reservations.create(
        actor,
        sku_id=body.sku,
        units=body.units,
        start_s=int(start.timestamp()),
        term_months=body.term_months,
        regions=body.regions,
        client_key=idempotency_key,
    )
    return public(view)


@router.get("", response_model=list[ReservationPublic])
def list_reservations(
    services: ServicesDep,
    actor: CurrentActor,
    status: str | None = Query(
        default=None,
        pattern=r"^(draft|pending_approval|approved|blocked|submitted_to_cloud|active|expired|rejected|cancelled)$",
    ),
    limit: Limit = 100,
    offset: Offset = 0,
) -> Any:
    """Oldest first; ``offset`` skips that many (page with ``limit`` and ``offset`` as on the other lists)."""
    parsed = None if status is None else STATUS_FROM_PUBLIC.get(status) or ReservationStatus(status)
    return [public(v) for v in services.reservations.list(actor, status=parsed, limit=limit, offset=offset)]


@router.get("/{reservation_id}", response_model=ReservationPublic)
def get_reservation(reservation_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    return public(services.reservations.get(actor, reservation_id))


@router.post("/{reservation_id}/approve", response_model=ReservationPublic)
def approve_reservation(
    reservation_id: IdPath,
    body: Annotated[ReservationApprove, Body(openapi_examples=seed.example(seed.APPROVE))],
    services: ServicesDep,
    actor: CurrentActor,
) -> Any:
    """Record the caller's approval. The approval that completes the set submits the order to the provider
    and answers ``submitted_to_cloud`` (``approved`` if the provider did not confirm; the reconciler retries)."""
    view = services.reservations.approve(
        actor, reservation_id, approver_ids=body.approver_ids, budget_code=body.budget_code
    )
    return public(view)


@router.post("/{reservation_id}/reject", response_model=ReservationPublic)
def reject_reservation(
    reservation_id: IdPath, body: ReservationDecision, services: ServicesDep, actor: CurrentActor
) -> Any:
    return public(services.reservations.decide(actor, reservation_id, ReservationStatus.REJECTED, body.reason))


@router.post("/{reservation_id}/cancel", response_model=ReservationPublic)
def cancel_reservation(
    reservation_id: IdPath, body: ReservationDecision, services: ServicesDep, actor: CurrentActor
) -> Any:
    return public(services.reservations.decide(actor, reservation_id, ReservationStatus.CANCELLED, body.reason))


@router.post("/{reservation_id}/submit", response_model=ReservationPublic)
def submit_reservation(reservation_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    """Retry the provider submission of an approved or blocked reservation (idempotent; a no-op in any other
    state)."""
    actor.require(*ADMINS)
    services.reservations.get(actor, reservation_id)
    return public(services.reservations.submit(reservation_id, actor_id=actor.user_id))


@router.post(":reconcile", response_model=ReconcilePublic)
def reconcile_reservations(services: ServicesDep, actor: CurrentActor) -> Any:
    """Run one reconciler pass now (it also runs at startup and every ``reconcile_interval_s``); the orders it
    submits are audited under the caller."""
    actor.require(*ADMINS)
    r = services.reservations.reconcile(actor_id=actor.user_id)
    return {
        "submitted": r.submitted,
        "still_pending": r.still_pending,
        "activated": r.activated,
        "expired": r.expired,
        "cancelled": r.cancelled,
        "errors": r.errors,
        "warnings": r.warnings,
    }
