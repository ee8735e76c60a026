"""The capacity blocks bought at once (at or below the single-approver threshold), as the audit log records them.

An at-once purchase has no request row: its ``capacity_block.purchase_started`` event (written before the provider
is called) and its ``capacity_block.purchased`` event (carrying the fee) are its record. From them this module
answers what the purchase flow of :mod:`gpufleet.service.capacity_blocks` asks: the earlier purchase of an offering
(a retry), the fees a buyer spent at once in the threshold's window, and the purchases whose answer was lost (the
provider holds the block under the purchase key, nothing recorded it), recorded now from the started event.
"""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select

from gpufleet.adapters.aws.capacity_blocks import BlockShape
from gpufleet.adapters.providers import ProviderRefused
from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.domain.errors import GpufleetError
from gpufleet.service.approval_rules import same_person
from gpufleet.service.auth import Actor
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.adapters.aws.world import AwsWorld

log = logging.getLogger("gpufleet.capacity_blocks")
STARTED = "capacity_block.purchase_started"  # an at-once purchase about to call the provider
NOT_HELD = frozenset({"payment-failed", "failed", "cancelled"})  # EC2 states of a block that holds nothing


def require_held(cr_id: str, state: str) -> None:
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


class AtOncePurchases:
    """The at-once purchases of the audit log (module docstring); ``window_s`` is the threshold's window."""

    def __init__(self, engine: Engine, clock: Clock, world: AwsWorld, *, window_s: int) -> None:
        self._engine = engine
        self._clock = clock
        self._world = world
        self._window_s = window_s

    def audit(self, actor_id: str, action: str, entity: str, entity_id: str, detail: dict[str, Any]) -> None:
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

    def purchased_event(self, reservation_id: str) -> dict[str, Any] | None:
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
        self.audit(actor_id, "capacity_block.purchased", "capacity_block", out["capacity_reservation_id"], out)
        return out

    def bought_at_once(self, region: str, offering_id: str) -> dict[str, Any] | None:
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
        require_held(str(prior["CapacityReservationId"]), str(prior.get("State", "")))
        return self.purchased_event(str(prior["CapacityReservationId"])) or self._record_lost(prior, offering_id)

    def bought_at_once_usd(self, actor: Actor) -> Decimal:
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

    def record_lost_purchases(self) -> list[str]:
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
                if prior is None or self.purchased_event(str(prior["CapacityReservationId"])) is not None:
                    continue
                require_held(str(prior["CapacityReservationId"]), str(prior.get("State", "")))
                if self._record_lost(prior, offering_id) is not None:
                    recorded.append(offering_id)
            except GpufleetError as exc:  # no answer, or a block that holds nothing: nothing to record
                log.warning("capacity block offering %s: lost purchase not recorded: %s", offering_id, exc)
        return recorded
