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

from sqlalchemy import Engine, select, update
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
from gpufleet.adapters.sql.models import ApprovalRow, PoolRow, RegionRow, ReservationRow, SkuRow
from gpufleet.domain.errors import ConflictError, InvalidTransition, NotFoundError, ValidationError
from gpufleet.domain.money import uusd_to_usd
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import (
    MAX_START_AHEAD_S,
    TERMS_MONTHS,
    Reservation,
    ReservationStatus,
    approvals_required,
    term_seconds,
)
from gpufleet.service.auth import APPROVER_ROLES, Actor, Role
from gpufleet.service.clock import Clock, IdGenerator
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
    ) -> None:
        """``may_submit``: whether this process may call the provider now (the leader hook of
        :mod:`gpufleet.service.leader`); when it says no, :meth:`submit` leaves the reservation ``approved`` for
        the leader. None: always (one process)."""
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
        """Propose a reservation. With ``client_key`` (the Idempotency-Key header) a retried proposal returns
        the first one; the same key with a different proposal is a ConflictError."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        if client_key is not None:
            prior = self._by_client_key(actor, client_key)
            if prior is not None:
                return self._same_proposal(prior, sku_id, units, start_s, term_months)
        now_s = self._clock.now_s()
        if units <= 0:
            raise ValidationError("units", f"must be > 0, got {units}")
        if term_months not in TERMS_MONTHS:
            raise ValidationError("term_months", f"must be one of {sorted(TERMS_MONTHS)}, got {term_months}")
        if start_s < now_s:
            raise ValidationError("start", "must not be in the past")
        if start_s - now_s > MAX_START_AHEAD_S:
            days = MAX_START_AHEAD_S // 86_400
            raise ValidationError("start", f"must be at most {days} days (ten years) ahead of now")
        if not regions:
            raise ValidationError("regions", "name at least one region")
        with UnitOfWork(self._engine, write=True) as uow:
            s = uow.session
            if s.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
            for i, region_id in enumerate(regions):
                if s.get(RegionRow, region_id) is None:
                    raise ValidationError(f"regions[{i}]", f"unknown region {region_id!r}")
            pool = self._reserved_pool(uow, sku_id, regions)
            res = Reservation(
                self._ids.new("res"),
                pool.id,
                sku_id,
                units,
                start_s,
                term_months,
                uusd_to_usd(pool.price_uusd_per_gpu_h),
            )
            est = res.est_cost_usd
            needed = approvals_required(est, self._threshold_usd)
            res.transition(S.PENDING_APPROVAL, at_s=now_s, actor=actor.user_id, reason="created")
            row = ReservationRow(
                id=res.id,
                pool_id=pool.id,
                sku_id=sku_id,
                region_id=pool.region_id,
                units=units,
                start_s=start_s,
                term_months=term_months,
                price_uusd_per_gpu_h=pool.price_uusd_per_gpu_h,
                est_cost_cents=int(est * 100),
                status=res.status.value,
                version=1,
                approvals_required=needed,
                created_by=actor.user_id,
                created_at_s=now_s,
                budget_code=None,
                idempotency_key=f"gpufleet-{res.id}",
                provider_order_id=None,
                client_key=client_key,
            )
            s.add(row)
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="reservation.created",
                entity="reservation",
                entity_id=res.id,
                detail={
                    "status": res.status.value,
                    "pool_id": pool.id,
                    "units": units,
                    "term_months": term_months,
                    "est_cost_usd": str(est),
                    "approvals_required": needed,
                },
            )
            try:
                uow.session.flush()
            except IntegrityError:  # a concurrent retry with the same key won the race
                uow.session.rollback()
                prior = self._by_client_key(actor, client_key or "")
                if prior is None:
                    raise
                return self._same_proposal(prior, sku_id, units, start_s, term_months)
            view = self._view(uow, row)
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

    @staticmethod
    def _same_proposal(
        prior: ReservationView, sku_id: str, units: int, start_s: int, term_months: int
    ) -> ReservationView:
        if (prior.sku_id, prior.units, prior.start_s, prior.term_months) != (sku_id, units, start_s, term_months):
            raise ConflictError(f"Idempotency-Key already used for reservation {prior.id} with a different proposal")
        return prior

    def _reserved_pool(self, uow: UnitOfWork, sku_id: str, regions: Sequence[str]) -> PoolRow:
        rows = uow.session.scalars(
            select(PoolRow).where(
                PoolRow.sku_id == sku_id, PoolRow.tier == Tier.RESERVED.value, PoolRow.region_id.in_(list(regions))
            )
        ).all()
        by_region = {r.region_id: r for r in sorted(rows, key=lambda r: (r.price_uusd_per_gpu_h, r.id))}
        for region_id in regions:
            if region_id in by_region:
                return by_region[region_id]
        raise ValidationError("regions", f"no reserved pool for {sku_id} in {', '.join(regions)}")

    # ---- approve ------------------------------------------------------------------------------------------
    def approve(
        self, actor: Actor, reservation_id: str, *, approver_ids: Sequence[str] | None, budget_code: str
    ) -> ReservationView:
        """Record the caller's approval; the approval that completes the set transitions and submits."""
        actor.require(*APPROVER_ROLES)
        if approver_ids and list(approver_ids) != [actor.user_id]:
            raise ValidationError(
                "approver_ids", "an approval is recorded for the authenticated caller only; list just yourself"
            )
        now_s = self._clock.now_s()
        completed = False
        view: ReservationView | None = None
        try:
            with UnitOfWork(self._engine, write=True) as uow:
                row = self._locked(uow, reservation_id)
                res = _domain(row)
                if not res.can_transition(S.APPROVED) or res.status is not S.PENDING_APPROVAL:
                    raise InvalidTransition(f"reservation {row.id}", row.status, S.APPROVED.value)
                seen = uow.session.scalars(select(ApprovalRow).where(ApprovalRow.reservation_id == row.id)).all()
                if any(a.user_id == actor.user_id for a in seen):
                    raise ConflictError(f"user {actor.user_id!r} has already approved reservation {row.id}")
                if row.approvals_required >= 2 and any(a.role == actor.role.value for a in seen):
                    other = next(iter(APPROVER_ROLES - {actor.role}))
                    raise ConflictError(
                        f"a {actor.role.value} has already approved reservation {row.id}; "
                        f"the second approval must come from a {other.value}"
                    )
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
                    detail={"role": actor.role.value, "budget_code": budget_code, "approvals": len(seen) + 1},
                )
                if len(seen) + 1 >= row.approvals_required:
                    res.transition(S.APPROVED, at_s=now_s, actor=actor.user_id, reason="approvals complete")
                    self._persist_status(uow, row, res, now_s, actor.user_id, budget_code=budget_code)
                    completed = True
                uow.session.flush()
                if not completed:  # the state this approval wrote, not whatever a concurrent one wrote after it
                    view = self._view(uow, row)
                uow.commit()
        except IntegrityError:
            raise ConflictError(f"user {actor.user_id!r} has already approved reservation {reservation_id}") from None
        if view is None:
            return self.submit(reservation_id, actor_id=actor.user_id)
        return view

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
            res = _domain(row)
            if res.status not in (S.DRAFT, S.PENDING_APPROVAL):
                raise InvalidTransition(f"reservation {row.id}", row.status, target.value)
            res.transition(target, at_s=now_s, actor=actor.user_id, reason=reason)
            self._persist_status(uow, row, res, now_s, actor.user_id)
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
            stmt = select(ReservationRow).order_by(ReservationRow.created_at_s, ReservationRow.id).limit(limit)
            if status is not None:
                stmt = stmt.where(ReservationRow.status == status.value)
            return [self._view(uow, r) for r in uow.session.scalars(stmt).all()]

    def _view(self, uow: UnitOfWork, row: ReservationRow) -> ReservationView:
        approvals = uow.session.scalars(
            select(ApprovalRow).where(ApprovalRow.reservation_id == row.id).order_by(ApprovalRow.at_s)
        ).all()
        return ReservationView(
            id=row.id,
            status=S(row.status),
            sku_id=row.sku_id,
            region_id=row.region_id,
            pool_id=row.pool_id,
            units=row.units,
            start_s=row.start_s,
            term_months=row.term_months,
            price_usd_per_gpu_h=uusd_to_usd(row.price_uusd_per_gpu_h),
            est_cost_usd=Decimal(row.est_cost_cents) / 100,
            approvals_required=row.approvals_required,
            approvals=tuple(ApprovalView(a.user_id, a.role, a.at_s) for a in approvals),
            created_by=row.created_by,
            created_at_s=row.created_at_s,
            budget_code=row.budget_code,
            provider_order_id=row.provider_order_id,
            version=row.version,
        )
