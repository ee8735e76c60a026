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

Where it lives: this module is the face (:class:`CapacityBlockService`) and the at-once purchase;
``capacity_block_search`` checks a search and lists its offerings, ``capacity_block_ledger`` reads the at-once
purchases off the audit log (retries, the threshold's sum, lost answers), ``capacity_block_approvals`` holds the
requests above the threshold (approve, reject, submit, reconcile, reads) and ``capacity_block_requests`` their rows.

Not covered: two buys of one approved request racing each other (two ``submit`` calls, or one and a reconciler
pass) both look the key up before either purchase is tagged; the second purchase then rests on the provider
selling an offering once (an offering is one block).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from gpufleet.adapters.aws.capacity_blocks import BlockShape
from gpufleet.domain.errors import NotFoundError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.capacity_block_approvals import READERS, DualApprovalPurchases
from gpufleet.service.capacity_block_ledger import STARTED, AtOncePurchases, purchase_key, require_held
from gpufleet.service.capacity_block_requests import BlockStatus
from gpufleet.service.capacity_block_search import BlockSearch, check_search, list_offerings
from gpufleet.service.clock import Clock, IdGenerator, RandomIds

if TYPE_CHECKING:
    from gpufleet.adapters.aws.capacity_blocks import CapacityBlockOffering
    from gpufleet.adapters.aws.world import AwsWorld


@dataclass(frozen=True, slots=True)
class PurchaseOutcome:
    pending: bool  # True: recorded for dual approval (202); False: bought at once (201)
    body: dict[str, Any]


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
        self._world = world
        self._threshold_usd = threshold_usd
        self._ledger = AtOncePurchases(engine, clock, world, window_s=window_s)
        self._approvals = DualApprovalPurchases(
            engine, clock, world, self._ledger, threshold_usd=threshold_usd, ids=ids or RandomIds()
        )

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
        check_search(self._engine, self._world, search)
        return list_offerings(self._world, search)

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
        check_search(self._engine, self._world, search)
        earlier = self._ledger.bought_at_once(region, offering_id)
        if earlier is not None:  # a retry: AWS no longer lists an offering once it is sold
            return PurchaseOutcome(False, {**earlier, "created": False})
        offer = next((o for o in list_offerings(self._world, search) if o.offering_id == offering_id), None)
        if offer is None:
            raise NotFoundError("capacity block offering", offering_id)
        if offer.upfront_fee_usd + self._ledger.bought_at_once_usd(actor) > self._threshold_usd:
            return PurchaseOutcome(True, self._approvals.request(actor, search, offer, budget_code))
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
        self._ledger.audit(actor.user_id, STARTED, "capacity_block_offering", offering_id, what)
        shape = BlockShape(offer.instance_type, offer.instance_count, offer.start_s, offer.end_s)
        bought = self._world.blocks.purchase(
            region, key=purchase_key(offering_id), offering_id=offering_id, shape=shape
        )
        require_held(bought.reservation_id, bought.state)
        out = {"capacity_reservation_id": bought.reservation_id, "state": bought.state, "created": bought.created,
               **what}  # fmt: skip
        if bought.created or self._ledger.purchased_event(bought.reservation_id) is None:
            self._ledger.audit(actor.user_id, "capacity_block.purchased", "capacity_block", bought.reservation_id, out)
        return PurchaseOutcome(False, out)

    # ---- requests above the threshold (capacity_block_approvals) --------------------------------------------
    def approve(self, actor: Actor, purchase_id: str, *, budget_code: str) -> dict[str, Any]:
        """Record the caller's approval; the one that completes the set buys (:meth:`submit`)."""
        return self._approvals.approve(actor, purchase_id, budget_code=budget_code)

    def reject(self, actor: Actor, purchase_id: str, reason: str) -> dict[str, Any]:
        """Reject a request still waiting for approval (the requester may withdraw their own)."""
        return self._approvals.reject(actor, purchase_id, reason)

    def submit(self, actor: Actor, purchase_id: str) -> dict[str, Any]:
        """Buy an approved request under its key (safe to call again)."""
        return self._approvals.submit(actor, purchase_id)

    def reconcile(self, actor: Actor) -> dict[str, list[str]]:
        """The reconciler's pass: buy the requests left approved, record the lost at-once purchases."""
        return self._approvals.reconcile(actor)

    def get(self, actor: Actor, purchase_id: str) -> dict[str, Any]:
        return self._approvals.get(actor, purchase_id)

    def list(self, actor: Actor, *, status: BlockStatus | None, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        return self._approvals.list(actor, status=status, limit=limit, offset=offset)
