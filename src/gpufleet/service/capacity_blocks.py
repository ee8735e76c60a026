"""Capacity Blocks for ML (AWS): list offerings for a SKU, GPU count, duration and date range; buy one.

Contract: a purchase is requested only by a ``finops_admin`` and only for an offering the provider lists under the
search sent with it. At or below the single-approver spend threshold (``approval_threshold_usd``) the requester's
call buys it at once (201). Above it the request is recorded (``capacity_block_purchases``, status
``pending_approval``, 202) and needs two distinct approvers who are not the requester: one ``finops_admin`` and
one ``ml_platform_admin`` (the same user twice is impossible by the approvals' primary key; a second approver of
the same role is refused, 409). The threshold is cumulative, as for reservations: the blocks the requester bought
at once in the approval window (``approval_window_days``) count with this one, so a purchase split into blocks
under the threshold still goes to two approvers once their sum passes it (two such purchases sent at the same
instant may both read the sum before either is recorded: not covered). The approval that completes the set moves the request to ``approved`` with a
conditional ``UPDATE ... WHERE version = :seen`` under the row lock, so of concurrent approvals exactly one does,
and only that caller buys: it re-lists the offering under the same search (no longer listed, or listed at
another fee: ``offering_gone``, 409) and buys it. Every purchase is idempotent per offering (key
``gpufleet-cb-<offering id>``, a tag looked up at the provider before buying): a lost answer or a crash leaves the
request ``approved``, and ``POST /v1/capacity-blocks/purchases/{id}/submit`` or the reconciler's next pass
(:meth:`CapacityBlockService.reconcile`) finds the first purchase by its key instead of buying again. Every request, approval and status change is audited.

Not covered: two buys of one approved request racing each other (two ``submit`` calls, or one and a reconciler
pass) both look the key up before either purchase is tagged; the second purchase then rests on the provider
selling an offering once (an offering is one block).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from gpufleet.adapters.aws.capacity_blocks import BlockShape
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.adapters.sql.models import AuditEventRow, CapacityBlockApprovalRow, CapacityBlockPurchaseRow, SkuRow
from gpufleet.domain.errors import (
    ConflictError,
    GpufleetError,
    InvalidTransition,
    NotFoundError,
    PermissionDenied,
    ValidationError,
)
from gpufleet.domain.money import price_to_uusd, uusd_to_usd
from gpufleet.service.approval_rules import check_next_approver, same_person
from gpufleet.service.auth import APPROVER_ROLES, Actor, Role
from gpufleet.service.capacity_block_requests import (
    OPEN,
    BlockStatus,
    approvals_of,
    lock_request,
    persist_status,
    view_of,
)
from gpufleet.service.clock import Clock, IdGenerator, RandomIds
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.adapters.aws.capacity_blocks import CapacityBlockOffering
    from gpufleet.adapters.aws.world import AwsWorld

log = logging.getLogger("gpufleet.capacity_blocks")
MAX_DURATION_H = 182 * 24
B = BlockStatus
READERS = (Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)


@dataclass(frozen=True, slots=True)
class BlockSearch:
    region: str
    sku_id: str
    gpus: int
    duration_h: int
    start_after_s: int
    end_before_s: int


@dataclass(frozen=True, slots=True)
class PurchaseOutcome:
    pending: bool  # True: recorded for dual approval (202); False: bought at once (201)
    body: dict[str, Any]


STARTED = "capacity_block.purchase_started"  # an at-once purchase about to call the provider
NOT_HELD = frozenset({"payment-failed", "failed", "cancelled"})  # EC2 states of a block that holds nothing


def _held(cr_id: str, state: str) -> None:
    """A block found in a state that holds nothing (its payment failed) is no purchase: a refusal."""
    if state in NOT_HELD:
        raise ProviderRefused(state, f"capacity block {cr_id} is {state}: nothing was bought")


def _shape(what: dict[str, Any]) -> BlockShape | None:
    """The offering's shape as a ``purchase_started`` event recorded it (None: an event without it)."""
    try:
        return BlockShape(str(what["instance_type"]), int(what["instance_count"]), int(what["start_s"]),
                          int(what["end_s"]))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def purchase_key(offering_id: str) -> str:
    return f"gpufleet-cb-{offering_id}"


class CapacityBlockService:
    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        world: AwsWorld,
        *,
        threshold_usd: Decimal,
        ids: IdGenerator | None = None,
        window_s: int = 30 * 86_400,
    ) -> None:
        """``window_s``: the requester's blocks bought at once in this window count towards the threshold (the
        reservations' ``approval_window_days``), so splitting a purchase into blocks under it does not help."""
        self._engine = engine
        self._clock = clock
        self._world = world
        self._threshold_usd = threshold_usd
        self._window_s = window_s
        self._ids = ids or RandomIds()

    def offerings(
        self,
        actor: Actor,
        *,
        region: str,
        sku_id: str,
        gpus: int,
        duration_h: int,
        start_after_s: int,
        end_before_s: int,
    ) -> list[CapacityBlockOffering]:
        actor.require(*READERS)
        search = BlockSearch(region, sku_id, gpus, duration_h, start_after_s, end_before_s)
        self._check(search)
        return self._list(search)

    def _list(self, q: BlockSearch) -> list[CapacityBlockOffering]:
        return self._world.blocks.offerings(
            q.region,
            sku_id=q.sku_id,
            gpus=q.gpus,
            duration_h=q.duration_h,
            start_after_s=q.start_after_s,
            end_before_s=q.end_before_s,
        )

    # ---- request (and buy at once within the threshold) ---------------------------------------------------
    def purchase(
        self,
        actor: Actor,
        *,
        offering_id: str,
        region: str,
        sku_id: str,
        gpus: int,
        duration_h: int,
        start_after_s: int,
        end_before_s: int,
        budget_code: str,
    ) -> PurchaseOutcome:
        actor.require(Role.FINOPS_ADMIN)
        search = BlockSearch(region, sku_id, gpus, duration_h, start_after_s, end_before_s)
        self._check(search)
        earlier = self._bought_at_once(region, offering_id)
        if earlier is not None:  # a retry: AWS no longer lists an offering once it is sold
            return PurchaseOutcome(False, {**earlier, "created": False})
        offer = next((o for o in self._list(search) if o.offering_id == offering_id), None)
        if offer is None:
            raise NotFoundError("capacity block offering", offering_id)
        if offer.upfront_fee_usd + self._bought_at_once_usd(actor) > self._threshold_usd:
            return PurchaseOutcome(True, self._request(actor, search, offer, budget_code))
        what = {
            "offering_id": offering_id,
            "region": region,
            "availability_zone": offer.availability_zone,
            "instance_type": offer.instance_type,
            "instance_count": offer.instance_count,
            "start_s": offer.start_s,
            "end_s": offer.end_s,
            "upfront_fee_usd": str(offer.upfront_fee_usd),
            "budget_code": budget_code,
        }
        # written before the call: if its answer is lost, a retry or the reconciler records the block from it
        self._audit(actor.user_id, STARTED, "capacity_block_offering", offering_id, what)
        shape = BlockShape(offer.instance_type, offer.instance_count, offer.start_s, offer.end_s)
        bought = self._world.blocks.purchase(
            region, key=purchase_key(offering_id), offering_id=offering_id, shape=shape
        )
        _held(bought.reservation_id, bought.state)
        out = {"capacity_reservation_id": bought.reservation_id, "state": bought.state, "created": bought.created,
               **what}  # fmt: skip
        if bought.created or self._purchased_event(bought.reservation_id) is None:
            self._audit(actor.user_id, "capacity_block.purchased", "capacity_block", bought.reservation_id, out)
        return PurchaseOutcome(False, out)

    def _audit(self, actor_id: str, action: str, entity: str, entity_id: str, detail: dict[str, Any]) -> None:
        with UnitOfWork(self._engine, write=True) as uow:
            uow.audit(at_s=self._clock.now_s(), actor=actor_id, action=action, entity=entity, entity_id=entity_id,
                      detail=detail)  # fmt: skip
            uow.commit()

    def _events(self, action: str, entity_id: str) -> list[tuple[str, dict[str, Any]]]:
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                select(AuditEventRow.actor, AuditEventRow.detail_json)
                .where(AuditEventRow.action == action, AuditEventRow.entity_id == entity_id)
                .order_by(AuditEventRow.at_s)
            ).all()
        return [(str(a), json.loads(d)) for a, d in rows]

    def _purchased_event(self, reservation_id: str) -> dict[str, Any] | None:
        """The ``capacity_block.purchased`` event of an at-once purchase of that block (a dual-approved one's names
        its request: not this)."""
        details = [d for _a, d in self._events("capacity_block.purchased", reservation_id)]
        return next((d for d in details if "purchase_id" not in d), None)

    def _record_lost(self, prior: dict[str, Any], offering_id: str) -> dict[str, Any] | None:
        """A block the provider holds under an at-once purchase's key whose answer was lost: its purchase, recorded
        now from the ``purchase_started`` event (fee and all, so it counts towards its buyer's threshold)."""
        started = self._events(STARTED, offering_id)
        if not started:
            return None  # bought through dual approval (its request's), or not by gpufleet
        actor_id, what = started[-1]
        out = {"capacity_reservation_id": str(prior["CapacityReservationId"]), "state": str(prior.get("State", "")),
               "created": False, "found_by_key": True, **what}  # fmt: skip
        self._audit(actor_id, "capacity_block.purchased", "capacity_block", out["capacity_reservation_id"], out)
        return out

    def _bought_at_once(self, region: str, offering_id: str) -> dict[str, Any] | None:
        """The answer of an earlier at-once purchase of the offering (its ``capacity_block.purchased`` event), if
        the provider holds a block under its purchase key; None otherwise (never bought, or bought through dual
        approval: that one is its request's). The block is looked for with the shape of the offering as it was when
        that purchase started (``purchase_started``): a reservation merely tagged with the key is not it."""
        started = self._events(STARTED, offering_id)
        if not started:
            return None  # never bought at once
        prior = self._world.blocks.find(region, purchase_key(offering_id), _shape(started[-1][1]))
        if prior is None:
            return None
        _held(str(prior["CapacityReservationId"]), str(prior.get("State", "")))
        return self._purchased_event(str(prior["CapacityReservationId"])) or self._record_lost(prior, offering_id)

    def _bought_at_once_usd(self, actor: Actor) -> Decimal:
        """Upfront fees of the blocks ``actor`` bought at once (single approver) within the window, from the
        audit log (each purchase's ``capacity_block.purchased`` event carries its fee; a purchase two approvers
        completed names its request and is not counted: it had its approvals)."""
        since = self._clock.now_s() - self._window_s
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                select(AuditEventRow.actor, AuditEventRow.detail_json).where(
                    AuditEventRow.action == "capacity_block.purchased", AuditEventRow.at_s >= since
                )
            ).all()
        # the person, not the spelling: blocks bought under "sam" and "Sam" add up (approval_rules.identity); a
        # dual-approved purchase's event names its request: not counted
        details = [json.loads(d) for who, d in rows if same_person(who, actor.user_id)]
        return sum((Decimal(str(d.get("upfront_fee_usd", "0"))) for d in details if "purchase_id" not in d), Decimal(0))

    def _request(self, actor: Actor, q: BlockSearch, offer: CapacityBlockOffering, budget_code: str) -> dict[str, Any]:
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

    # ---- approve / reject ---------------------------------------------------------------------------------
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

    # ---- buy ----------------------------------------------------------------------------------------------
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
            offer = next((o for o in self._list(search) if o.offering_id == offering_id), None)
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
        out["recorded"] = self._record_lost_purchases()
        return out

    def _record_lost_purchases(self) -> list[str]:
        since = self._clock.now_s() - self._window_s
        with UnitOfWork(self._engine, write=False) as uow:
            started = uow.session.execute(
                select(AuditEventRow.entity_id, AuditEventRow.detail_json)
                .where(AuditEventRow.action == STARTED, AuditEventRow.at_s >= since)
                .order_by(AuditEventRow.at_s)
            ).all()
        recorded = []
        for offering_id, detail in {str(o): d for o, d in started}.items():
            try:  # one lookup at the provider per offering
                what = json.loads(detail)
                prior = self._world.blocks.find(what["region"], purchase_key(offering_id), _shape(what))
                if prior is None or self._purchased_event(str(prior["CapacityReservationId"])) is not None:
                    continue
                _held(str(prior["CapacityReservationId"]), str(prior.get("State", "")))
                if self._record_lost(prior, offering_id) is not None:
                    recorded.append(offering_id)
            except GpufleetError as exc:  # no answer, or a block that holds nothing: nothing to record
                log.warning("capacity block offering %s: lost purchase not recorded: %s", offering_id, exc)
        return recorded

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
        self._audit(actor_id, action, "capacity_block_purchase", purchase_id, detail)

    # ---- read ---------------------------------------------------------------------------------------------
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

    def _check(self, q: BlockSearch) -> None:
        if q.region not in self._world.config.regions:
            raise ValidationError("region", f"{q.region!r} is not a configured AWS region")
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(SkuRow, q.sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {q.sku_id!r}")
        if q.gpus <= 0:
            raise ValidationError("gpus", f"must be > 0, got {q.gpus}")
        days = q.duration_h // 24
        if q.duration_h % 24 or not 24 <= q.duration_h <= MAX_DURATION_H or (days > 14 and days % 7):
            raise ValidationError(  # EC2's rule: 1-day steps up to 14 days, then 7-day steps up to 182
                "duration_h",
                f"must be 1-14 whole days or whole weeks up to {MAX_DURATION_H // 24} days, got {q.duration_h} h",
            )
        if q.end_before_s <= q.start_after_s:
            raise ValidationError("end_before", "must be after start_after")
