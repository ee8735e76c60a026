"""A Capacity Block purchase request's rows in the store: its statuses, the row lock, the one way a status is
written (a conditional ``UPDATE ... WHERE version = :seen`` with an audit record, inside the caller's unit of work),
and the view the API returns.

Statuses: ``pending_approval`` -> ``approved`` (the second distinct approval) or ``rejected``; ``approved`` ->
``purchased`` (with the capacity reservation id), ``offering_gone`` (no longer listed under the same search) or
``failed`` (the provider refused the purchase itself, not the moment).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import select

from gpufleet.adapters.sql.models import CapacityBlockApprovalRow, CapacityBlockPurchaseRow
from gpufleet.domain.errors import InvalidTransition, NotFoundError
from gpufleet.domain.money import CENT, uusd_to_usd
from gpufleet.service.uow import UnitOfWork


class BlockStatus(StrEnum):
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    PURCHASED = "purchased"
    OFFERING_GONE = "offering_gone"
    FAILED = "failed"


B = BlockStatus
ALLOWED: dict[BlockStatus, frozenset[BlockStatus]] = {
    B.PENDING_APPROVAL: frozenset({B.APPROVED, B.REJECTED}),
    B.APPROVED: frozenset({B.PURCHASED, B.OFFERING_GONE, B.FAILED}),
}
OPEN = (B.PENDING_APPROVAL.value, B.APPROVED.value)  # the partial unique index of migration 0011


def usd_text(uusd: int) -> str:
    """Micro-dollars as a USD string: to the cent when the amount is whole cents (as AWS writes fees), else exact."""
    usd = uusd_to_usd(uusd)
    return str(usd.quantize(CENT)) if usd == usd.quantize(CENT) else str(usd)


def lock_request(uow: UnitOfWork, purchase_id: str) -> CapacityBlockPurchaseRow:
    row = uow.session.scalar(
        uow.lock(select(CapacityBlockPurchaseRow).where(CapacityBlockPurchaseRow.id == purchase_id))
    )
    if row is None:
        raise NotFoundError("capacity block purchase", purchase_id)
    return row


def persist_status(
    uow: UnitOfWork,
    row: CapacityBlockPurchaseRow,
    target: BlockStatus,
    now_s: int,
    actor_id: str,
    reason: str,
    *,
    capacity_reservation_id: str | None = None,
) -> None:
    """Write ``target`` if the table allows it from the row's status and nobody changed the row since we read it."""
    source = B(row.status)
    if target not in ALLOWED.get(source, frozenset()):
        raise InvalidTransition(f"capacity block purchase {row.id}", source.value, target.value)
    values: dict[str, object] = {"status": target.value}
    if capacity_reservation_id is not None:
        values["capacity_reservation_id"] = capacity_reservation_id
    uow.update_versioned(CapacityBlockPurchaseRow, row, values, f"capacity block purchase {row.id}")
    uow.audit(
        at_s=now_s,
        actor=actor_id,
        action="capacity_block.status_changed",
        entity="capacity_block_purchase",
        entity_id=row.id,
        detail={"from": source.value, "to": target.value, "reason": reason, **values},
    )
    uow.session.expire(row)


def approvals_of(uow: UnitOfWork, purchase_id: str) -> list[CapacityBlockApprovalRow]:
    return list(
        uow.session.scalars(
            select(CapacityBlockApprovalRow)
            .where(CapacityBlockApprovalRow.purchase_id == purchase_id)
            .order_by(CapacityBlockApprovalRow.at_s, CapacityBlockApprovalRow.user_id)
        )
    )


def view_of(uow: UnitOfWork, row: CapacityBlockPurchaseRow) -> dict[str, Any]:
    """The request as the API returns it (money as a decimal string, exact)."""
    return {
        "id": row.id,
        "status": row.status,
        "offering_id": row.offering_id,
        "region": row.region_id,
        "sku": row.sku_id,
        "search": {
            "gpus": row.gpus,
            "duration_h": row.duration_h,
            "start_after_s": row.start_after_s,
            "end_before_s": row.end_before_s,
        },
        "instance_type": row.instance_type,
        "availability_zone": row.availability_zone,
        "instance_count": row.instance_count,
        "start_s": row.start_s,
        "end_s": row.end_s,
        "upfront_fee_usd": usd_text(row.upfront_fee_uusd),
        "currency": row.currency,
        "budget_code": row.budget_code,
        "requested_by": row.created_by,
        "requested_at_s": row.created_at_s,
        "approvals_required": row.approvals_required,
        "approvals": [
            {"user_id": a.user_id, "role": a.role, "budget_code": a.budget_code, "at_s": a.at_s}
            for a in approvals_of(uow, row.id)
        ],
        "purchase_key": row.purchase_key,
        "capacity_reservation_id": row.capacity_reservation_id,
        "version": row.version,
    }
