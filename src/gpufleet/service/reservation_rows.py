"""A reservation's rows in the store: the views the API returns, the row lock, and the one way a status is written.

Every status change passes the domain's gate (:meth:`gpufleet.domain.reservations.Reservation.transition`) and is
then written here with a conditional ``UPDATE ... WHERE version = :seen`` and an audit record, inside the caller's
unit of work (which holds the row lock: ``FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import select

from gpufleet.adapters.sql.models import ApprovalRow, ReservationRow
from gpufleet.domain.errors import NotFoundError
from gpufleet.domain.money import uusd_to_usd
from gpufleet.domain.reservations import Reservation, ReservationStatus
from gpufleet.service.uow import UnitOfWork

S = ReservationStatus


@dataclass(frozen=True, slots=True)
class ApprovalView:
    user_id: str
    role: str
    at_s: int


@dataclass(frozen=True, slots=True)
class ReservationView:
    id: str
    status: ReservationStatus
    sku_id: str
    region_id: str
    pool_id: str
    units: int
    start_s: int
    term_months: int
    price_usd_per_gpu_h: Decimal
    est_cost_usd: Decimal
    approvals_required: int
    approvals: tuple[ApprovalView, ...]
    created_by: str
    created_at_s: int
    budget_code: str | None
    provider_order_id: str | None
    version: int
    group_id: str | None = None
    regions: tuple[tuple[str, int], ...] = ()  # (region, units) of every part; the head's view only
    parts: tuple[str, ...] = ()  # reservation ids of the group's parts (head first)
    request_fingerprint: str | None = None
    status_reason: str | None = None  # the provider's why of the status (a blocked one's refusal), if it gave one


def domain_of(row: ReservationRow) -> Reservation:
    return Reservation(
        row.id,
        row.pool_id,
        row.sku_id,
        row.units,
        row.start_s,
        row.term_months,
        uusd_to_usd(row.price_uusd_per_gpu_h),
        status=S(row.status),
    )


def lock_row(uow: UnitOfWork, reservation_id: str) -> ReservationRow:
    row = uow.session.scalar(uow.lock(select(ReservationRow).where(ReservationRow.id == reservation_id)))
    if row is None:
        raise NotFoundError("reservation", reservation_id)
    return row


def lock_group(uow: UnitOfWork, row: ReservationRow) -> list[ReservationRow]:
    """The reservation and, for a multi-region one, its other parts (locked; the head first)."""
    if row.group_id is None:
        return [row]
    others = uow.session.scalars(
        uow.lock(
            select(ReservationRow)
            .where(ReservationRow.group_id == row.group_id, ReservationRow.id != row.id)
            .order_by(ReservationRow.region_id)
        )
    ).all()
    return [row, *others]


def persist_status(
    uow: UnitOfWork,
    row: ReservationRow,
    res: Reservation,
    now_s: int,
    actor_id: str,
    *,
    budget_code: str | None = None,
    provider_order_id: str | None = None,
    provider_operation_id: str | None = None,
    status_reason: str | None = None,
    order_failed: bool = False,
) -> None:
    """Write the status the domain gate accepted, only if nobody changed the row since we read it.

    ``status_reason`` is the new status's (every change writes it: None clears the last one's); the provider
    operation is written with the order and cleared by any other change; ``order_failed``: the provider's order is gone
    (its operation failed), so its id is cleared for the next submission's."""
    change = res.history[-1]
    values: dict[str, object] = {"status": res.status.value}
    if status_reason is not None or row.status_reason is not None:
        values["status_reason"] = status_reason
    if budget_code is not None:
        values["budget_code"] = budget_code
    if provider_order_id is not None or order_failed:
        values["provider_order_id"] = provider_order_id
    if row.provider_operation_id is not None or provider_operation_id is not None:
        values["provider_operation_id"] = provider_operation_id
    uow.update_versioned(ReservationRow, row, values, f"reservation {row.id}")
    uow.audit(
        at_s=now_s,
        actor=actor_id,
        action="reservation.status_changed",
        entity="reservation",
        entity_id=row.id,
        detail={"from": change.source.value, "to": change.target.value, "reason": change.reason, **values},
    )
    uow.session.expire(row)


def view_of(uow: UnitOfWork, row: ReservationRow) -> ReservationView:
    approvals = uow.session.scalars(
        select(ApprovalRow).where(ApprovalRow.reservation_id == row.id).order_by(ApprovalRow.at_s)
    ).all()
    parts: list[ReservationRow] = [row]
    if row.group_id is not None and row.group_id == row.id:
        parts += uow.session.scalars(
            select(ReservationRow)
            .where(ReservationRow.group_id == row.id, ReservationRow.id != row.id)
            .order_by(ReservationRow.region_id)
        ).all()
    return ReservationView(
        id=row.id,
        status=S(row.status),
        sku_id=row.sku_id,
        region_id=row.region_id,
        pool_id=row.pool_id,
        units=sum(p.units for p in parts),
        start_s=row.start_s,
        term_months=row.term_months,
        price_usd_per_gpu_h=uusd_to_usd(row.price_uusd_per_gpu_h),
        est_cost_usd=Decimal(sum(p.est_cost_cents for p in parts)) / 100,
        approvals_required=row.approvals_required,
        approvals=tuple(ApprovalView(a.user_id, a.role, a.at_s) for a in approvals),
        created_by=row.created_by,
        created_at_s=row.created_at_s,
        budget_code=row.budget_code,
        provider_order_id=row.provider_order_id,
        version=row.version,
        group_id=row.group_id,
        regions=tuple((p.region_id, p.units) for p in parts),
        parts=tuple(p.id for p in parts),
        request_fingerprint=row.request_fingerprint,
        status_reason=row.status_reason,
    )
