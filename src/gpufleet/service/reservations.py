"""The reservation workflow: create -> approve (one or two approvers) -> submit to the provider -> active.

Status changes go through the domain's ONE gate (:meth:`gpufleet.domain.reservations.Reservation.transition`)
and are persisted with a conditional ``UPDATE ... WHERE version = :seen`` inside a transaction that holds the
row lock (``FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite). So of any number of concurrent approve
calls exactly one makes the transition, and only that caller submits to the provider.

Submission is idempotent: the key is fixed at creation (``gpufleet-<reservation id>``) and every retry, every
reconciler pass and every restart reuses it. A crash between the provider call and the commit leaves the
reservation ``approved`` with an order at the provider; :meth:`ReservationService.reconcile` finds the order
under the same key and records it, never buying twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.adapters.providers import (
    OrderRequest,
    OrderState,
    ProviderLifecycle,
    ProviderOrder,
    ProviderPort,
    ProviderRefused,
    ProviderTimeout,
)
from gpufleet.adapters.sql.models import ApprovalRow, RegionRow, ReservationRow, SkuRow
from gpufleet.domain.errors import ConflictError, InvalidTransition, NotFoundError, PermissionDenied, ValidationError
from gpufleet.domain.money import uusd_to_usd
from gpufleet.domain.reservations import (
    Reservation,
    ReservationStatus,
    term_seconds,
)
from gpufleet.service import approval_rules as rules
from gpufleet.service.approval_rules import split_units
from gpufleet.service.auth import APPROVER_ROLES, Actor, Role
from gpufleet.service.clock import Clock, IdGenerator
from gpufleet.service.reservation_proposals import (
    check_proposal,
    proposal_fingerprint,
    reserved_pools,
    same_proposal,
)
from gpufleet.service.uow import UnitOfWork

S = ReservationStatus
CrashHook = Callable[[str], None]


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


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    submitted: list[str] = field(default_factory=list)
    still_pending: list[str] = field(default_factory=list)
    activated: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)  # the provider reports the order cancelled or failed


def _domain(row: ReservationRow) -> Reservation:
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
        self._engine = engine
        self._clock = clock
        self._ids = ids
        self._provider = provider
        self._threshold_usd = approval_threshold_usd
        self._max_attempts = provider_max_attempts
        self._crash_hook = crash_hook
        self._may_submit = may_submit

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
    ) -> ReservationView:
        """Propose a reservation. Several regions split the units across them (one row per region, as even as
        possible, the remainder to the first; approved and decided as one group through the head's id). With
        ``client_key`` (the Idempotency-Key header) a retried proposal returns the first one; the same key with
        a different proposal (any field, regions included) is a ConflictError naming the key."""
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
                rules.cost_cents(r.units, term_months, rules.approval_price_uusd(sku_id, p.price_uusd_per_gpu_h, 0))
                for r, p in zip(parts, pools, strict=True)
            )
            if this_cents > rules.MAX_EST_COST_USD * 100:
                raise ValidationError(
                    "units",
                    f"{units} x {sku_id} for {term_months} months is about {Decimal(this_cents) / 100:,.0f} USD at "
                    f"list price, above the sanity bound of {rules.MAX_EST_COST_USD:,.0f} USD (est_cost_usd)",
                )
            need = rules.requirement(s, this_cents, exclude_ids=(), requester=actor.user_id, now_s=now_s,
                                     window_s=self._window_s, threshold_usd=self._threshold_usd)  # fmt: skip
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
                    est_cost_cents=int(res.est_cost_usd * 100),
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
                        "est_cost_usd": str(res.est_cost_usd),
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
            view = self._view(uow, rows[0])
            uow.commit()
            return view

    def _by_client_key(self, actor: Actor, client_key: str) -> ReservationView | None:
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.scalar(
                select(ReservationRow).where(
                    ReservationRow.created_by == actor.user_id, ReservationRow.client_key == client_key
                )
            )
            return None if row is None else self._view(uow, row)

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
                row = self._locked(uow, reservation_id)
                if row.group_id is not None and row.group_id != row.id:
                    raise ConflictError(f"reservation {row.id} is part of {row.group_id}; approve {row.group_id}")
                if row.created_by == actor.user_id:
                    raise PermissionDenied(
                        f"{actor.user_id!r} requested reservation {row.id} and may not approve it; "
                        "another finops_admin or ml_platform_admin must"
                    )
                res = _domain(row)
                if not res.can_transition(S.APPROVED) or res.status is not S.PENDING_APPROVAL:
                    raise InvalidTransition(f"reservation {row.id}", row.status, S.APPROVED.value)
                group = self._group(uow, row)
                need = rules.requirement(uow.session, rules.valued_cents(uow.session, group),
                                         exclude_ids=[g.id for g in group], requester=row.created_by, now_s=now_s,
                                         window_s=self._window_s, threshold_usd=self._threshold_usd)  # fmt: skip
                needed = max(need.approvals_required, row.approvals_required)
                seen = [
                    a
                    for a in uow.session.scalars(select(ApprovalRow).where(ApprovalRow.reservation_id == row.id))
                    if a.user_id != row.created_by  # the requester's approval never counts
                ]
                if any(a.user_id == actor.user_id for a in seen):
                    raise ConflictError(f"user {actor.user_id!r} has already approved reservation {row.id}")
                if needed >= 2 and any(a.role == actor.role.value for a in seen):
                    other = next(iter(APPROVER_ROLES - {actor.role}))
                    raise ConflictError(
                        f"a {actor.role.value} has already approved reservation {row.id}; "
                        f"the second approval must come from a {other.value}"
                    )
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
                        part = _domain(g)
                        part.transition(S.APPROVED, at_s=now_s, actor=actor.user_id, reason="approvals complete")
                        self._persist_status(uow, g, part, now_s, actor.user_id, budget_code=budget_code)
                        completed.append(g.id)
                uow.session.flush()
                if not completed:  # the state this approval wrote, not whatever a concurrent one wrote after it
                    view = self._view(uow, row)
                uow.commit()
        except IntegrityError:
            raise ConflictError(f"user {actor.user_id!r} has already approved reservation {reservation_id}") from None
        if view is None:
            for part_id in completed[1:]:
                self.submit(part_id, actor_id=actor.user_id)
            return self.submit(reservation_id, actor_id=actor.user_id)
        return view

    def _group(self, uow: UnitOfWork, row: ReservationRow) -> list[ReservationRow]:
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

    def _locked(self, uow: UnitOfWork, reservation_id: str) -> ReservationRow:
        row = uow.session.scalar(uow.lock(select(ReservationRow).where(ReservationRow.id == reservation_id)))
        if row is None:
            raise NotFoundError("reservation", reservation_id)
        return row

    def _persist_status(
        self,
        uow: UnitOfWork,
        row: ReservationRow,
        res: Reservation,
        now_s: int,
        actor_id: str,
        *,
        budget_code: str | None = None,
        provider_order_id: str | None = None,
    ) -> None:
        """Write the status the domain gate accepted, only if nobody changed the row since we read it."""
        change = res.history[-1]
        values: dict[str, object] = {"status": res.status.value, "version": row.version + 1}
        if budget_code is not None:
            values["budget_code"] = budget_code
        if provider_order_id is not None:
            values["provider_order_id"] = provider_order_id
        result = uow.session.execute(
            update(ReservationRow)
            .where(ReservationRow.id == row.id, ReservationRow.version == row.version)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise ConflictError(f"reservation {row.id} changed concurrently; retry")
        uow.audit(
            at_s=now_s,
            actor=actor_id,
            action="reservation.status_changed",
            entity="reservation",
            entity_id=row.id,
            detail={"from": change.source.value, "to": change.target.value, "reason": change.reason, **values},
        )
        uow.session.expire(row)

    # ---- submit / reconcile -------------------------------------------------------------------------------
    def submit(self, reservation_id: str, *, actor_id: str) -> ReservationView:
        """Send an approved reservation to the provider under its idempotency key and record the order.

        Safe to call any number of times, concurrently, before or after a crash: the provider dedups on the
        key and the final conditional update records the order once. Timeouts are retried up to
        ``provider_max_attempts``; if all time out the reservation stays ``approved`` for the reconciler.
        """
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(ReservationRow, reservation_id)
            if row is None:
                raise NotFoundError("reservation", reservation_id)
            if row.status != S.APPROVED.value:
                return self._view(uow, row)
            if self._may_submit is not None and not self._may_submit():  # a follower: the leader submits
                return self._view(uow, row)
            key = row.idempotency_key
            req = OrderRequest(row.sku_id, row.region_id, row.units, row.term_months, row.start_s)
        order = self._call_provider(key, req)
        if self._crash_hook is not None:
            self._crash_hook("after_provider_call")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = self._locked(uow, reservation_id)
            if order is None:
                uow.audit(
                    at_s=now_s,
                    actor=actor_id,
                    action="reservation.submission_unconfirmed",
                    entity="reservation",
                    entity_id=row.id,
                    detail={"idempotency_key": key, "attempts": self._max_attempts},
                )
            elif isinstance(order, ProviderRefused):
                self._refused(uow, row, order, now_s, actor_id)
            elif row.status == S.APPROVED.value:
                res = _domain(row)
                res.transition(S.SUBMITTED, at_s=now_s, actor=actor_id, reason=f"provider order {order.order_id}")
                self._persist_status(uow, row, res, now_s, actor_id, provider_order_id=order.order_id)
            view = self._view(uow, row)
            uow.commit()
            return view

    def _call_provider(self, key: str, req: OrderRequest) -> ProviderOrder | ProviderRefused | None:
        """The order, the provider's refusal, or None when every attempt had an unknown outcome (each retry
        uses the same key, and the provider port looks the order up by it before placing it again)."""
        for _attempt in range(self._max_attempts):
            try:
                return self._provider.submit(key, req)
            except ProviderTimeout:
                continue
            except ProviderRefused as refused:
                return refused
        return None

    def _refused(
        self, uow: UnitOfWork, row: ReservationRow, refused: ProviderRefused, now_s: int, actor_id: str
    ) -> None:
        """A refusal about the moment (no capacity now) leaves the reservation approved for the reconciler's next
        pass; a refusal of the order itself cancels it. Either way the provider's code is in the audit log."""
        detail = {"code": refused.code, "message": refused.message[:300], "retryable": refused.retryable}
        uow.audit(
            at_s=now_s,
            actor=actor_id,
            action="reservation.submission_refused",
            entity="reservation",
            entity_id=row.id,
            detail=detail,
        )
        if not refused.retryable and row.status == S.APPROVED.value:
            res = _domain(row)
            res.transition(S.CANCELLED, at_s=now_s, actor=actor_id, reason=f"provider refused: {refused.code}")
            self._persist_status(uow, row, res, now_s, actor_id)

    def reconcile(self) -> ReconcileReport:
        """Bring the store in line with the provider (run at startup and periodically).

        approved -> submitted (finding or placing the order under the same key). Then, with a provider whose
        orders have a lifecycle of their own (:class:`ProviderLifecycle`, e.g. AWS), the provider's state decides
        and the clock does not: submitted -> active when it reports the order active, -> expired when expired,
        -> cancelled when cancelled or failed; an active commitment the provider reports cancelled ends as
        expired (the table allows no active -> cancelled). With the simulated provider, the clock decides:
        submitted -> active once the start time has passed; active -> expired at the end of the term.
        """
        report = ReconcileReport()
        with UnitOfWork(self._engine, write=False) as uow:
            approved = uow.session.scalars(
                select(ReservationRow.id).where(ReservationRow.status == S.APPROVED.value).order_by(ReservationRow.id)
            ).all()
        for rid in approved:
            view = self.submit(rid, actor_id="reconciler")
            (report.submitted if view.status is S.SUBMITTED else report.still_pending).append(rid)
        if isinstance(self._provider, ProviderLifecycle):
            self._follow_provider(self._provider, report)
            return report
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            rows = uow.session.scalars(
                uow.lock(
                    select(ReservationRow)
                    .where(ReservationRow.status.in_([S.SUBMITTED.value, S.ACTIVE.value]))
                    .order_by(ReservationRow.id)
                )
            ).all()
            for row in rows:
                res = _domain(row)
                if res.status is S.SUBMITTED and row.start_s <= now_s:
                    res.transition(S.ACTIVE, at_s=now_s, actor="reconciler", reason="start reached")
                    self._persist_status(uow, row, res, now_s, "reconciler")
                    report.activated.append(row.id)
                    res = _domain(row)
                if res.status is S.ACTIVE and row.start_s + term_seconds(row.term_months) <= now_s:
                    res.transition(S.EXPIRED, at_s=now_s, actor="reconciler", reason="term ended")
                    self._persist_status(uow, row, res, now_s, "reconciler")
                    report.expired.append(row.id)
            uow.commit()
        return report

    def _follow_provider(self, provider: ProviderLifecycle, report: ReconcileReport) -> None:
        """Describe the submitted and active orders (outside any transaction), then apply the states."""
        with UnitOfWork(self._engine, write=False) as uow:
            orders = {
                rid: str(oid)
                for rid, oid in uow.session.execute(
                    select(ReservationRow.id, ReservationRow.provider_order_id).where(
                        ReservationRow.status.in_([S.SUBMITTED.value, S.ACTIVE.value]),
                        ReservationRow.provider_order_id.is_not(None),
                    )
                ).all()
            }
        if not orders:
            return
        states = provider.describe(sorted(orders.values()))
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            for rid in sorted(orders):
                seen = states.get(orders[rid])
                if seen is None:  # unknown to the provider (or another region): leave it, never guess
                    continue
                row = self._locked(uow, rid)
                if row.provider_order_id == orders[rid]:
                    self._apply_provider_state(uow, row, seen, now_s, report)
            uow.commit()

    def _apply_provider_state(
        self, uow: UnitOfWork, row: ReservationRow, seen: OrderState, now_s: int, report: ReconcileReport
    ) -> None:
        status = S(row.status)
        why = f"provider state {seen.provider_state}"
        steps: list[tuple[ReservationStatus, list[str]]] = []
        if status is S.SUBMITTED and seen.state in ("active", "expired"):
            steps.append((S.ACTIVE, report.activated))
        if status in (S.SUBMITTED, S.ACTIVE) and (
            seen.state == "expired" or (status is S.ACTIVE and seen.state == "cancelled")
        ):
            steps.append((S.EXPIRED, report.expired))
        elif status is S.SUBMITTED and seen.state == "cancelled":
            steps.append((S.CANCELLED, report.cancelled))
        for target, bucket in steps:
            res = _domain(row)
            res.transition(target, at_s=now_s, actor="reconciler", reason=why)
            self._persist_status(uow, row, res, now_s, "reconciler")
            bucket.append(row.id)

    # ---- reject / cancel / read ---------------------------------------------------------------------------
    def decide(self, actor: Actor, reservation_id: str, target: ReservationStatus, reason: str) -> ReservationView:
        """Reject or cancel. Only before the order reaches the provider (cancel at the provider otherwise)."""
        actor.require(*APPROVER_ROLES)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = self._locked(uow, reservation_id)
            if row.group_id is not None and row.group_id != row.id:
                raise ConflictError(f"reservation {row.id} is part of {row.group_id}; decide on {row.group_id}")
            res = _domain(row)
            if res.status not in (S.DRAFT, S.PENDING_APPROVAL):
                raise InvalidTransition(f"reservation {row.id}", row.status, target.value)
            for g in self._group(uow, row):  # a multi-region reservation is decided as one
                part = _domain(g)
                part.transition(target, at_s=now_s, actor=actor.user_id, reason=reason)
                self._persist_status(uow, g, part, now_s, actor.user_id)
            view = self._view(uow, row)
            uow.commit()
            return view

    def get(self, actor: Actor, reservation_id: str) -> ReservationView:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(ReservationRow, reservation_id)
            if row is None:
                raise NotFoundError("reservation", reservation_id)
            return self._view(uow, row)

    def list(self, actor: Actor, *, status: ReservationStatus | None, limit: int) -> list[ReservationView]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        with UnitOfWork(self._engine, write=False) as uow:
            stmt = (
                select(ReservationRow)
                .where(or_(ReservationRow.group_id.is_(None), ReservationRow.group_id == ReservationRow.id))
                .order_by(ReservationRow.created_at_s, ReservationRow.id)
                .limit(limit)
            )  # the parts of a multi-region reservation are listed in its head's ``regions``
            if status is not None:
                stmt = stmt.where(ReservationRow.status == status.value)
            return [self._view(uow, r) for r in uow.session.scalars(stmt).all()]

    def _view(self, uow: UnitOfWork, row: ReservationRow) -> ReservationView:
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
        )
