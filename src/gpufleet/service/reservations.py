"""The reservation workflow: create -> approve (one or two approvers) -> submit to the provider -> active.

Status changes go through the domain's ONE gate (:meth:`gpufleet.domain.reservations.Reservation.transition`) and
are persisted by :func:`gpufleet.service.reservation_rows.persist_status` (a conditional ``UPDATE ... WHERE version
= :seen`` inside a transaction that holds the row lock). So of any number of concurrent approve calls exactly one
makes the transition, and only that caller submits to the provider. Submission and reconciliation with the provider
(idempotent, crash-safe) are :class:`gpufleet.service.reservation_orders.ProviderOrders`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import Engine, or_, select
from sqlalchemy.exc import IntegrityError

from gpufleet.adapters.providers import ProviderPort, WholeMachines
from gpufleet.adapters.sql.models import ApprovalRow, RegionRow, ReservationRow, SkuRow
from gpufleet.domain.errors import ConflictError, InvalidTransition, NotFoundError, PermissionDenied, ValidationError
from gpufleet.domain.money import uusd_to_usd
from gpufleet.domain.reservations import Reservation, ReservationStatus
from gpufleet.service import approval_rules as rules
from gpufleet.service.approval_rules import split_units
from gpufleet.service.auth import APPROVER_ROLES, Actor, Role
from gpufleet.service.clock import Clock, IdGenerator
from gpufleet.service.reservation_orders import CrashHook, ProviderOrders, ReconcileReport
from gpufleet.service.reservation_proposals import (
    check_proposal,
    proposal_fingerprint,
    reserved_pools,
    same_proposal,
)
from gpufleet.service.reservation_rows import ReservationView, domain_of, lock_group, lock_row, persist_status, view_of
from gpufleet.service.uow import UnitOfWork

S = ReservationStatus


def _iso(at_s: int) -> str:
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ReservationService:
    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        ids: IdGenerator,
        provider: ProviderPort,
        *,
        approval_threshold_usd: Decimal,
        provider_max_attempts: int,
        crash_hook: CrashHook | None = None,
        may_submit: Callable[[], bool] | None = None,
        approval_window_s: int = 30 * 86_400,
    ) -> None:
        """``may_submit``: whether this process may call the provider now (the leader hook of
        :mod:`gpufleet.service.leader`); when it says no, :meth:`submit` leaves the reservation ``approved`` for
        the leader. None: always (one process). ``approval_window_s``: the requester's commitments over this
        window count towards the approval threshold."""
        self._window_s = approval_window_s
        # the approval values the GPUs the provider reserves (whole machines), not the GPUs proposed
        self._bought = provider.units_bought if isinstance(provider, WholeMachines) else None
        self._engine = engine
        self._clock = clock
        self._ids = ids
        self._threshold_usd = approval_threshold_usd
        self.orders = ProviderOrders(
            engine, clock, provider, max_attempts=provider_max_attempts, crash_hook=crash_hook, may_submit=may_submit
        )

    def units_bought(self, sku_id: str, units: int) -> int:
        """The GPUs the provider reserves for an order of ``units`` GPUs (whole machines; the simulated provider:
        ``units``)."""
        return units if self._bought is None else self._bought(sku_id, units)

    def submit(self, reservation_id: str, *, actor_id: str) -> ReservationView:
        """Send an approved reservation to the provider (:meth:`ProviderOrders.submit`)."""
        return self.orders.submit(reservation_id, actor_id=actor_id)

    def reconcile(self, *, actor_id: str = "reconciler") -> ReconcileReport:
        """Bring the store in line with the provider (:meth:`ProviderOrders.reconcile`); ``actor_id``: who asked
        (the audit log names them for the submissions the pass makes; the leader's own passes are ``reconciler``)."""
        return self.orders.reconcile(actor_id=actor_id)

    # ---- create -------------------------------------------------------------------------------------------
    def create(
        self,
        actor: Actor,
        *,
        sku_id: str,
        units: int,
        start_s: int,
        term_months: int,
        regions: Sequence[str],
        client_key: str | None = None,
        on_created: Callable[[UnitOfWork, ReservationView], None] | None = None,
    ) -> ReservationView:
        """Propose a reservation. Several regions split the units across them (one row per region, as even as
        possible, the remainder to the first; approved and decided as one group through the head's id). With
        ``client_key`` (the Idempotency-Key header) a retried proposal returns the first one; the same key with
        a different proposal (any field, regions included) is a ConflictError naming the key. ``on_created`` writes
        what goes with a new proposal (the loop's reason) in its transaction: both are committed, or neither; it is
        not called when the key returns an earlier proposal."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        fingerprint = proposal_fingerprint(sku_id, units, start_s, term_months, regions)
        if client_key is not None:
            prior = self._by_client_key(actor, client_key)
            if prior is not None:
                return same_proposal(prior, fingerprint, client_key)
        now_s = self._clock.now_s()
        check_proposal(units, start_s, term_months, regions, now_s)
        with UnitOfWork(self._engine, write=True) as uow:
            s = uow.session
            if s.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
            for i, region_id in enumerate(regions):
                if s.get(RegionRow, region_id) is None:
                    raise ValidationError(f"regions[{i}]", f"unknown region {region_id!r}")
            pools = reserved_pools(uow.session, sku_id, regions)
            parts = [
                Reservation(self._ids.new("res"), pool.id, sku_id, n, start_s, term_months,
                            uusd_to_usd(pool.price_uusd_per_gpu_h))
                for pool, n in zip(pools, split_units(units, len(regions)), strict=True)
            ]  # fmt: skip
            this_cents = sum(
                rules.cost_cents(self.units_bought(sku_id, r.units), term_months,
                                 rules.approval_price_uusd(sku_id, p.price_uusd_per_gpu_h, 0))
                for r, p in zip(parts, pools, strict=True)
            )  # fmt: skip
            if this_cents > rules.MAX_EST_COST_USD * 100:
                raise ValidationError(
                    "units",
                    f"{units} x {sku_id} for {term_months} months is about {Decimal(this_cents) / 100:,.0f} USD at "
                    f"list price, above the sanity bound of {rules.MAX_EST_COST_USD:,.0f} USD (est_cost_usd)",
                )
            need = rules.requirement(s, this_cents, exclude_ids=(), requester=actor.user_id, now_s=now_s,
                                     window_s=self._window_s, threshold_usd=self._threshold_usd,
                                     bought=self._bought)  # fmt: skip

            def charged(r: Reservation) -> Decimal:  # the machines bought at the price of creation (est_cost_usd)
                return replace(r, units=self.units_bought(sku_id, r.units)).est_cost_usd

            head = parts[0].id
            group_id = head if len(parts) > 1 else None
            rows = []
            for res, pool in zip(parts, pools, strict=True):
                res.transition(S.PENDING_APPROVAL, at_s=now_s, actor=actor.user_id, reason="created")
                row = ReservationRow(
                    id=res.id,
                    pool_id=pool.id,
                    sku_id=sku_id,
                    region_id=pool.region_id,
                    units=res.units,
                    start_s=start_s,
                    term_months=term_months,
                    price_uusd_per_gpu_h=pool.price_uusd_per_gpu_h,
                    est_cost_cents=int(charged(res) * 100),
                    status=res.status.value,
                    version=1,
                    approvals_required=need.approvals_required,
                    created_by=actor.user_id,
                    created_at_s=now_s,
                    budget_code=None,
                    idempotency_key=f"gpufleet-{res.id}",
                    provider_order_id=None,
                    client_key=client_key if res.id == head else None,
                    request_fingerprint=fingerprint if res.id == head else None,
                    group_id=group_id,
                )
                s.add(row)
                rows.append(row)
                uow.audit(
                    at_s=now_s,
                    actor=actor.user_id,
                    action="reservation.created",
                    entity="reservation",
                    entity_id=res.id,
                    detail={
                        "status": res.status.value,
                        "pool_id": pool.id,
                        "units": res.units,
                        "term_months": term_months,
                        "est_cost_usd": str(charged(res)),
                        "units_bought": self.units_bought(sku_id, res.units),
                        "group_id": group_id,
                        **need.detail(),
                    },
                )
            try:
                uow.session.flush()
            except IntegrityError:  # a concurrent retry with the same key won the race
                uow.session.rollback()
                prior = self._by_client_key(actor, client_key or "")
                if prior is None:
                    raise
                return same_proposal(prior, fingerprint, client_key or "")
            view = view_of(uow, rows[0])
            if on_created is not None:
                on_created(uow, view)
            uow.commit()
            return view

    def by_client_key(self, actor: Actor, client_key: str) -> ReservationView | None:
        """The reservation ``actor`` proposed under ``client_key`` (the Idempotency-Key), if any."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        return self._by_client_key(actor, client_key)

    def _by_client_key(self, actor: Actor, client_key: str) -> ReservationView | None:
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.scalar(
                select(ReservationRow).where(
                    ReservationRow.created_by == actor.user_id, ReservationRow.client_key == client_key
                )
            )
            return None if row is None else view_of(uow, row)

    # ---- approve ------------------------------------------------------------------------------------------
    def approve(
        self, actor: Actor, reservation_id: str, *, approver_ids: Sequence[str] | None, budget_code: str
    ) -> ReservationView:
        """Record the caller's approval; the approval that completes the set transitions and submits.

        The requirement (one or two approvals) is decided now by :mod:`gpufleet.service.approval_rules`: list
        price at this time and the requester's commitments in the rolling window. The requester may not approve
        (403). ``approver_ids``, if sent, must list the caller: each human approves with their own token."""
        actor.require(*APPROVER_ROLES)
        if approver_ids and actor.user_id not in approver_ids:
            raise ValidationError(
                "approver_ids",
                f"must include the caller ({actor.user_id!r}): an approval is recorded for the authenticated caller "
                "only; the other approvers approve with their own tokens",
            )
        now_s = self._clock.now_s()
        completed: list[str] = []
        view: ReservationView | None = None
        try:
            with UnitOfWork(self._engine, write=True) as uow:
                row = lock_row(uow, reservation_id)
                if row.group_id is not None and row.group_id != row.id:
                    raise ConflictError(f"reservation {row.id} is part of {row.group_id}; approve {row.group_id}")
                if rules.same_person(row.created_by, actor.user_id):  # under any spelling of the name
                    raise PermissionDenied(
                        f"{actor.user_id!r} requested reservation {row.id} and may not approve it; "
                        "another finops_admin or ml_platform_admin must"
                    )
                res = domain_of(row)
                if not res.can_transition(S.APPROVED) or res.status is not S.PENDING_APPROVAL:
                    raise InvalidTransition(f"reservation {row.id}", row.status, S.APPROVED.value)
                if row.start_s < now_s:  # the order would start in the past: part of the term bought for nothing
                    raise ConflictError(
                        f"reservation {row.id} starts at {_iso(row.start_s)}, which has passed; it cannot be approved "
                        "(reject it and propose it again with a new start)"
                    )
                group = lock_group(uow, row)
                need = rules.requirement(uow.session, rules.valued_cents(uow.session, group, self._bought),
                                         exclude_ids=[g.id for g in group], requester=row.created_by, now_s=now_s,
                                         window_s=self._window_s, threshold_usd=self._threshold_usd,
                                         bought=self._bought)  # fmt: skip
                needed = max(need.approvals_required, row.approvals_required)
                seen = [
                    a
                    for a in uow.session.scalars(select(ApprovalRow).where(ApprovalRow.reservation_id == row.id))
                    if not rules.same_person(a.user_id, row.created_by)  # the requester's approval never counts
                ]
                rules.check_next_approver(f"reservation {row.id}", seen, actor.user_id, actor.role.value,
                                          two=needed >= 2)  # fmt: skip
                if needed != row.approvals_required:
                    for g in group:
                        g.approvals_required = needed
                uow.session.add(
                    ApprovalRow(
                        reservation_id=row.id,
                        user_id=actor.user_id,
                        role=actor.role.value,
                        budget_code=budget_code,
                        at_s=now_s,
                    )
                )
                uow.audit(
                    at_s=now_s,
                    actor=actor.user_id,
                    action="reservation.approval_recorded",
                    entity="reservation",
                    entity_id=row.id,
                    detail={"role": actor.role.value, "budget_code": budget_code, "approvals": len(seen) + 1,
                            **need.detail(), "approvals_required": needed},
                )  # fmt: skip
                if len(seen) + 1 >= needed:
                    for g in group:
                        part = domain_of(g)
                        part.transition(S.APPROVED, at_s=now_s, actor=actor.user_id, reason="approvals complete")
                        persist_status(uow, g, part, now_s, actor.user_id, budget_code=budget_code)
                        completed.append(g.id)
                uow.session.flush()
                if not completed:  # the state this approval wrote, not whatever a concurrent one wrote after it
                    view = view_of(uow, row)
                uow.commit()
        except IntegrityError:
            raise ConflictError(f"user {actor.user_id!r} has already approved reservation {reservation_id}") from None
        if view is None:
            for part_id in completed[1:]:
                self.submit(part_id, actor_id=actor.user_id)
            return self.submit(reservation_id, actor_id=actor.user_id)
        return view

    # ---- reject / cancel / read ---------------------------------------------------------------------------
    def decide(self, actor: Actor, reservation_id: str, target: ReservationStatus, reason: str) -> ReservationView:
        """Reject or cancel. Only before the order reaches the provider (cancel at the provider otherwise)."""
        actor.require(*APPROVER_ROLES)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = lock_row(uow, reservation_id)
            if row.group_id is not None and row.group_id != row.id:
                raise ConflictError(f"reservation {row.id} is part of {row.group_id}; decide on {row.group_id}")
            res = domain_of(row)
            if res.status not in (S.DRAFT, S.PENDING_APPROVAL):
                raise InvalidTransition(f"reservation {row.id}", row.status, target.value)
            for g in lock_group(uow, row):  # a multi-region reservation is decided as one
                part = domain_of(g)
                part.transition(target, at_s=now_s, actor=actor.user_id, reason=reason)
                persist_status(uow, g, part, now_s, actor.user_id)
            view = view_of(uow, row)
            uow.commit()
            return view

    def get(self, actor: Actor, reservation_id: str) -> ReservationView:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(ReservationRow, reservation_id)
            if row is None:
                raise NotFoundError("reservation", reservation_id)
            return view_of(uow, row)

    def list(
        self, actor: Actor, *, status: ReservationStatus | None, limit: int, offset: int = 0
    ) -> list[ReservationView]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        with UnitOfWork(self._engine, write=False) as uow:
            stmt = (
                select(ReservationRow)
                .where(or_(ReservationRow.group_id.is_(None), ReservationRow.group_id == ReservationRow.id))
                .order_by(ReservationRow.created_at_s, ReservationRow.id)
                .limit(limit)
                .offset(offset)
            )  # the parts of a multi-region reservation are listed in its head's ``regions``
            if status is not None:
                stmt = stmt.where(ReservationRow.status == status.value)
            return [view_of(uow, r) for r in uow.session.scalars(stmt).all()]
