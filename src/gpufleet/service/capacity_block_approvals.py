"""Capacity block purchases above the single-approver threshold: the request (``capacity_block_purchases``, status
``pending_approval``), its two approvals (one ``finops_admin``, one ``ml_platform_admin``, neither the requester)
or its rejection, the buy of an approved request under its purchase key (:meth:`DualApprovalPurchases.submit`,
safe to repeat), the reconciler's pass over requests left ``approved`` and the reads. The contract is
:mod:`gpufleet.service.capacity_blocks`'s; :class:`~gpufleet.service.capacity_blocks.CapacityBlockService` is the
face the API and the reconciler call.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from gpufleet.adapters.aws.capacity_blocks import BlockShape
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.adapters.sql.models import CapacityBlockApprovalRow, CapacityBlockPurchaseRow
from gpufleet.domain.errors import ConflictError, GpufleetError, InvalidTransition, NotFoundError, PermissionDenied
from gpufleet.domain.money import price_to_uusd, uusd_to_usd
from gpufleet.service.approval_rules import check_next_approver, same_person
from gpufleet.service.auth import APPROVER_ROLES, Actor, Role
from gpufleet.service.capacity_block_ledger import NOT_HELD, AtOncePurchases, purchase_key
from gpufleet.service.capacity_block_requests import (
    OPEN,
    BlockStatus,
    approvals_of,
    lock_request,
    persist_status,
    view_of,
)
from gpufleet.service.capacity_block_search import BlockSearch, list_offerings
from gpufleet.service.clock import Clock, IdGenerator
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.adapters.aws.capacity_blocks import CapacityBlockOffering
    from gpufleet.adapters.aws.world import AwsWorld

log = logging.getLogger("gpufleet.capacity_blocks")
B = BlockStatus
READERS = (Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)


class DualApprovalPurchases:
    """Requests above the threshold, their approvals and their buy (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        world: AwsWorld,
        ledger: AtOncePurchases,
        *,
        threshold_usd: Decimal,
        ids: IdGenerator,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._world = world
        self._ledger = ledger
        self._threshold_usd = threshold_usd
        self._ids = ids

    def request(self, actor: Actor, q: BlockSearch, offer: CapacityBlockOffering, budget_code: str) -> dict[str, Any]:
        """Record a purchase above the threshold for dual approval. The requester's retry (same offering, same
        budget code) returns the open or purchased request; anyone else's request for such an offering is a 409.
        A rejected request, or one whose offering was gone, does not stop a new one."""
        prior = self._open_for(offer.offering_id)
        if prior is not None:
            return self._same_request(prior, actor, budget_code)
        now_s = self._clock.now_s()
        row = CapacityBlockPurchaseRow(
            id=self._ids.new("cbp"),
            offering_id=offer.offering_id,
            region_id=q.region,
            sku_id=q.sku_id,
            gpus=q.gpus,
            duration_h=q.duration_h,
            start_after_s=q.start_after_s,
            end_before_s=q.end_before_s,
            instance_type=offer.instance_type,
            availability_zone=offer.availability_zone,
            instance_count=offer.instance_count,
            start_s=offer.start_s,
            end_s=offer.end_s,
            upfront_fee_uusd=price_to_uusd(offer.upfront_fee_usd),
            currency=offer.currency,
            budget_code=budget_code,
            status=B.PENDING_APPROVAL.value,
            version=1,
            approvals_required=2,
            created_by=actor.user_id,
            created_at_s=now_s,
            purchase_key=purchase_key(offer.offering_id),
            capacity_reservation_id=None,
        )
        try:
            with UnitOfWork(self._engine, write=True) as uow:
                uow.session.add(row)
                uow.session.flush()
                view = view_of(uow, row)
                uow.audit(
                    at_s=now_s,
                    actor=actor.user_id,
                    action="capacity_block.purchase_requested",
                    entity="capacity_block_purchase",
                    entity_id=row.id,
                    detail={
                        **{k: view[k] for k in ("status", "offering_id", "region", "sku", "search", "upfront_fee_usd",
                                                "budget_code", "approvals_required")},
                        "threshold_usd": str(self._threshold_usd),
                    },
                )  # fmt: skip
                uow.commit()
                return view
        except IntegrityError:  # a concurrent request for the same offering won the race
            prior = self._open_for(offer.offering_id)
            if prior is None:
                raise
            return self._same_request(prior, actor, budget_code)

    def _open_for(self, offering_id: str) -> dict[str, Any] | None:
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.scalar(
                select(CapacityBlockPurchaseRow)
                .where(
                    CapacityBlockPurchaseRow.offering_id == offering_id,
                    CapacityBlockPurchaseRow.status.in_((*OPEN, B.PURCHASED.value)),
                )
                .order_by(CapacityBlockPurchaseRow.created_at_s.desc())
                .limit(1)
            )
            return None if row is None else view_of(uow, row)

    @staticmethod
    def _same_request(prior: dict[str, Any], actor: Actor, budget_code: str) -> dict[str, Any]:
        if prior["requested_by"] == actor.user_id and prior["budget_code"] == budget_code:
            return prior
        raise ConflictError(
            f"offering {prior['offering_id']} already has a purchase request {prior['id']} "
            f"({prior['status']}, requested by {prior['requested_by']!r}, budget code {prior['budget_code']!r})"
        )

    def approve(self, actor: Actor, purchase_id: str, *, budget_code: str) -> dict[str, Any]:
        """Record the caller's approval; the approval that completes the set (one finops_admin and one
        ml_platform_admin, neither the requester) moves the request to approved and buys (:meth:`submit`)."""
        actor.require(*APPROVER_ROLES)
        now_s = self._clock.now_s()
        completed = False
        view: dict[str, Any] | None = None
        try:
            with UnitOfWork(self._engine, write=True) as uow:
                row = lock_request(uow, purchase_id)
                if same_person(row.created_by, actor.user_id):
                    raise PermissionDenied(
                        f"{actor.user_id!r} requested capacity block purchase {row.id} and may not approve it; "
                        "a finops_admin and an ml_platform_admin other than the requester must"
                    )
                if row.status != B.PENDING_APPROVAL.value:
                    raise InvalidTransition(f"capacity block purchase {row.id}", row.status, B.APPROVED.value)
                seen = [a for a in approvals_of(uow, row.id) if not same_person(a.user_id, row.created_by)]
                check_next_approver(f"capacity block purchase {row.id}", seen, actor.user_id, actor.role.value,
                                    two=True)  # fmt: skip
                uow.session.add(
                    CapacityBlockApprovalRow(
                        purchase_id=row.id,
                        user_id=actor.user_id,
                        role=actor.role.value,
                        budget_code=budget_code,
                        at_s=now_s,
                    )
                )
                uow.audit(
                    at_s=now_s,
                    actor=actor.user_id,
                    action="capacity_block.approval_recorded",
                    entity="capacity_block_purchase",
                    entity_id=row.id,
                    detail={"role": actor.role.value, "budget_code": budget_code, "approvals": len(seen) + 1,
                            "approvals_required": row.approvals_required},
                )  # fmt: skip
                uow.session.flush()
                if len(seen) + 1 >= row.approvals_required:
                    persist_status(uow, row, B.APPROVED, now_s, actor.user_id, "approvals complete")
                    completed = True
                else:  # the state this approval wrote, not whatever a concurrent one wrote after it
                    view = view_of(uow, row)
                uow.commit()
        except IntegrityError:
            raise ConflictError(
                f"user {actor.user_id!r} has already approved capacity block purchase {purchase_id}"
            ) from None
        if not completed:
            assert view is not None
            return view
        return self.submit(actor, purchase_id)

    def reject(self, actor: Actor, purchase_id: str, reason: str) -> dict[str, Any]:
        """Reject a request still waiting for approval (the requester may withdraw their own)."""
        actor.require(*APPROVER_ROLES)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = lock_request(uow, purchase_id)
            if row.status != B.PENDING_APPROVAL.value:
                raise InvalidTransition(f"capacity block purchase {row.id}", row.status, B.REJECTED.value)
            persist_status(uow, row, B.REJECTED, now_s, actor.user_id, reason or "rejected")
            view = view_of(uow, row)
            uow.commit()
            return view

    def submit(self, actor: Actor, purchase_id: str) -> dict[str, Any]:
        """Buy an approved request: find an earlier purchase under its key (a lost answer, a crash), else re-list
        the offering under the same search and buy it. Safe to call again; a purchased request is returned as
        is, any other status but approved is a 409."""
        actor.require(*APPROVER_ROLES)
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(CapacityBlockPurchaseRow, purchase_id)
            if row is None:
                raise NotFoundError("capacity block purchase", purchase_id)
            if row.status == B.PURCHASED.value:
                return view_of(uow, row)
            if row.status != B.APPROVED.value:
                raise InvalidTransition(f"capacity block purchase {row.id}", row.status, B.PURCHASED.value)
            search = BlockSearch(
                row.region_id, row.sku_id, row.gpus, row.duration_h, row.start_after_s, row.end_before_s
            )
            offering_id, key, fee_uusd = row.offering_id, row.purchase_key, row.upfront_fee_uusd
            row_shape = (row.instance_type, row.instance_count, row.start_s, row.end_s)  # the offering as approved
        shape = BlockShape(row_shape[0], row_shape[1], row_shape[2], row_shape[3])
        prior = self._world.blocks.find(search.region, key, shape)
        if prior is not None:
            cr_id, state, reason = str(prior["CapacityReservationId"]), str(prior.get("State", "")), "found by key"
            if state in NOT_HELD:
                return self._finish(purchase_id, B.FAILED, actor.user_id, f"found by key {state}: nothing was bought")
        else:
            offer = next((o for o in list_offerings(self._world, search) if o.offering_id == offering_id), None)
            if offer is None or price_to_uusd(offer.upfront_fee_usd) != fee_uusd:
                why = (
                    "no longer listed under the same search"
                    if offer is None
                    else f"listed at {offer.upfront_fee_usd} USD, not the approved {uusd_to_usd(fee_uusd)} USD"
                )
                after = self._finish(purchase_id, B.OFFERING_GONE, actor.user_id, f"offering {offering_id} {why}")
                if after["status"] == B.PURCHASED.value:  # a concurrent submit bought it first
                    return after
                raise ConflictError(f"capacity block offering {offering_id} is {why}; nothing was bought")
            try:
                bought = self._world.blocks.purchase(search.region, key=key, offering_id=offering_id, shape=shape)
            except ProviderTimeout:
                self._note(purchase_id, actor.user_id, "capacity_block.purchase_unconfirmed", {"purchase_key": key})
                raise
            except ProviderRefused as refused:
                detail = {"code": refused.code, "message": refused.message[:300], "retryable": refused.retryable}
                if refused.retryable:  # about the moment: stays approved, submit again (or the offering is gone)
                    self._note(purchase_id, actor.user_id, "capacity_block.purchase_refused", detail)
                else:
                    self._finish(purchase_id, B.FAILED, actor.user_id, f"provider refused: {refused.code}")
                raise
            cr_id, state = bought.reservation_id, bought.state
            if state in NOT_HELD:
                return self._finish(purchase_id, B.FAILED, actor.user_id, f"provider state {state}: nothing bought")
            reason = "bought" if bought.created else "found by key"
        return self._finish(purchase_id, B.PURCHASED, actor.user_id, reason, capacity_reservation_id=cr_id,
                            provider_state=state)  # fmt: skip

    def reconcile(self, actor: Actor) -> dict[str, list[str]]:
        """Buy every request left ``approved`` (a crash between the approval and the purchase, a lost answer, a
        capacity refusal): :meth:`submit` each, oldest first, under its key; and record the at-once purchases of the
        threshold's window whose answer was lost and that nobody retried (``recorded``). Run by the reconciler's
        pass."""
        with UnitOfWork(self._engine, write=False) as uow:
            ids = list(
                uow.session.scalars(
                    select(CapacityBlockPurchaseRow.id)
                    .where(CapacityBlockPurchaseRow.status == B.APPROVED.value)
                    .order_by(CapacityBlockPurchaseRow.created_at_s, CapacityBlockPurchaseRow.id)
                )
            )
        out: dict[str, list[str]] = {"purchased": [], "offering_gone": [], "failed": [], "still_approved": []}
        for purchase_id in ids:
            try:
                status = self.submit(actor, purchase_id)["status"]
            except ConflictError:
                status = self.get(actor, purchase_id)["status"]
            except GpufleetError as exc:  # a timeout or a refusal: audited by submit
                log.warning("capacity block purchase %s not bought this pass: %s", purchase_id, exc)
                status = self.get(actor, purchase_id)["status"]
            out.setdefault("still_approved" if status == B.APPROVED.value else status, []).append(purchase_id)
        out["recorded"] = self._ledger.record_lost_purchases()
        return out

    def _finish(
        self,
        purchase_id: str,
        target: BlockStatus,
        actor_id: str,
        reason: str,
        *,
        capacity_reservation_id: str | None = None,
        provider_state: str = "",
    ) -> dict[str, Any]:
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = lock_request(uow, purchase_id)
            if row.status != B.APPROVED.value:  # a concurrent submit recorded the outcome first
                return view_of(uow, row)
            persist_status(uow, row, target, now_s, actor_id, reason, capacity_reservation_id=capacity_reservation_id)
            view = view_of(uow, row)
            if target is B.PURCHASED:
                uow.audit(
                    at_s=now_s,
                    actor=actor_id,
                    action="capacity_block.purchased",
                    entity="capacity_block",
                    entity_id=str(capacity_reservation_id),
                    detail={"purchase_id": purchase_id, "state": provider_state, "found_by_key": reason != "bought",
                            **{k: view[k] for k in ("offering_id", "region", "availability_zone", "instance_type",
                                                    "instance_count", "start_s", "end_s", "upfront_fee_usd",
                                                    "budget_code")}},
                )  # fmt: skip
            uow.commit()
            return view

    def _note(self, purchase_id: str, actor_id: str, action: str, detail: dict[str, Any]) -> None:
        self._ledger.audit(actor_id, action, "capacity_block_purchase", purchase_id, detail)

    def get(self, actor: Actor, purchase_id: str) -> dict[str, Any]:
        actor.require(*READERS)
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(CapacityBlockPurchaseRow, purchase_id)
            if row is None:
                raise NotFoundError("capacity block purchase", purchase_id)
            return view_of(uow, row)

    def list(self, actor: Actor, *, status: BlockStatus | None, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        actor.require(*READERS)
        with UnitOfWork(self._engine, write=False) as uow:
            stmt = (
                select(CapacityBlockPurchaseRow)
                .order_by(CapacityBlockPurchaseRow.created_at_s, CapacityBlockPurchaseRow.id)
                .limit(limit)
                .offset(offset)
            )
            if status is not None:
                stmt = stmt.where(CapacityBlockPurchaseRow.status == status.value)
            return [view_of(uow, r) for r in uow.session.scalars(stmt).all()]
