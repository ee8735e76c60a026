"""A reservation's order at the provider: submission under a fixed idempotency key, and reconciliation.

Submission is idempotent: the key is fixed at creation (``gpufleet-<reservation id>``) and every retry, every
reconciler pass and every restart reuses it. A crash between the provider call and the commit leaves the
reservation ``approved`` with an order at the provider; :meth:`ProviderOrders.reconcile` finds the order under
the same key and records it, never buying twice. Status changes go through the domain gate and
:func:`gpufleet.service.reservation_rows.persist_status`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine, select

from gpufleet.adapters.providers import (
    OrderRecord,
    OrderRequest,
    OrderState,
    ProviderLifecycle,
    ProviderOrder,
    ProviderPort,
    ProviderRefused,
    ProviderTimeout,
    SubmitWindow,
)
from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.domain.errors import GpufleetError, NotFoundError
from gpufleet.domain.reservations import ReservationStatus, term_seconds
from gpufleet.service.clock import Clock
from gpufleet.service.reservation_rows import ReservationView, domain_of, lock_row, persist_status, view_of
from gpufleet.service.uow import UnitOfWork

S = ReservationStatus
log = logging.getLogger(__name__)
MISMATCH = "reservation.provider_mismatch"  # what the provider holds against the record, audited once per change
START_PASSED = "start_passed"  # the code of the refusal gpufleet itself makes of an order whose start has passed
WAITING = (S.APPROVED.value, S.BLOCKED.value)  # to be submitted: approved, or held by a permission or policy
CrashHook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    submitted: list[str] = field(default_factory=list)
    still_pending: list[str] = field(default_factory=list)
    activated: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)  # the provider reports the order cancelled or failed
    # approved ones whose submission raised or was refused for the moment (left approved, or blocked), and why: a
    # permission or a policy the provider enforces, no capacity now; and submitted ones whose operation failed so
    errors: list[dict[str, str]] = field(default_factory=list)
    # what the provider's answers say against gpufleet's record (e.g. an edited end tag): reported, not obeyed
    warnings: list[str] = field(default_factory=list)


class ProviderOrders:
    """Submits approved reservations to the provider and follows their orders (the reconciler's first step)."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        provider: ProviderPort,
        *,
        max_attempts: int,
        crash_hook: CrashHook | None = None,
        may_submit: Callable[[], bool] | None = None,
    ) -> None:
        """``may_submit``: whether this process may call the provider now (the leader hook of
        :mod:`gpufleet.service.leader`); when it says no, :meth:`submit` leaves the reservation ``approved`` for
        the leader. None: always (one process)."""
        self._engine = engine
        self._clock = clock
        self._provider = provider
        self._max_attempts = max_attempts
        self._crash_hook = crash_hook
        self._may_submit = may_submit

    def submit(self, reservation_id: str, *, actor_id: str) -> ReservationView:
        """Send an approved reservation to the provider under its idempotency key and record the order.

        Safe to call any number of times, concurrently, before or after a crash: the provider dedups on the
        key and the final conditional update records the order once. An order whose start has passed is not placed
        (:meth:`_late_order`: the reservation is cancelled unless the order is there already). A provider with a
        :class:`SubmitWindow` is not called before the order's earliest moment: the reservation stays ``approved``
        for a later pass. Timeouts are retried up to ``provider_max_attempts``; if all time out the reservation
        stays ``approved`` for the reconciler.
        """
        return self._submit(reservation_id, actor_id=actor_id)[0]

    def _submit(self, reservation_id: str, *, actor_id: str) -> tuple[ReservationView, ProviderRefused | None]:
        """:meth:`submit`, and the provider's refusal when there was one (the reconciler reports it)."""
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(ReservationRow, reservation_id)
            if row is None:
                raise NotFoundError("reservation", reservation_id)
            if row.status not in WAITING:
                return view_of(uow, row), None
            if self._may_submit is not None and not self._may_submit():  # a follower: the leader submits
                return view_of(uow, row), None
            key = row.idempotency_key
            req = OrderRequest(row.sku_id, row.region_id, row.units, row.term_months, row.start_s)
            now_s = self._clock.now_s()
            late = row.start_s < now_s
            if not late and isinstance(self._provider, SubmitWindow) and self._provider.earliest_submit_s(req) > now_s:
                return view_of(uow, row), None  # too early for the provider: a later reconciler pass submits it
        order = self._late_order(key) if late else self._call_provider(key, req)
        if self._crash_hook is not None:
            self._crash_hook("after_provider_call")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = lock_row(uow, reservation_id)
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
            elif row.status in WAITING:
                res = domain_of(row)
                res.transition(S.SUBMITTED, at_s=now_s, actor=actor_id, reason=f"provider order {order.order_id}")
                persist_status(uow, row, res, now_s, actor_id, provider_order_id=order.order_id,
                               provider_operation_id=order.operation_id)  # fmt: skip
            view = view_of(uow, row)
            uow.commit()
            return view, order if isinstance(order, ProviderRefused) else None

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

    def _late_order(self, key: str) -> ProviderOrder | ProviderRefused | None:
        """An order whose start has passed is not placed: the one already placed under the key (an answer lost
        before the start) is recorded; without one the reservation is cancelled (a refusal, not retryable)."""
        try:
            found = self._provider.find(key)
        except ProviderTimeout:
            return None
        except ProviderRefused as refused:
            return refused
        if found is not None:
            return found
        return ProviderRefused(
            START_PASSED, "the start passed before the order was submitted; propose it again with a new start"
        )

    def _refused(
        self,
        uow: UnitOfWork,
        row: ReservationRow,
        refused: ProviderRefused,
        now_s: int,
        actor_id: str,
        *,
        order_failed: bool = False,
    ) -> None:
        """A refusal about the moment (no capacity now) leaves the reservation approved for the reconciler's next pass;
        one by a permission, a policy or an authentication on gpufleet's side (``blocked``) holds it as ``blocked``
        with the provider's reason, tried on each pass until it is fixed; a refusal of the order itself cancels it.
        Either way the provider's code is in the audit log. The same for a submitted order whose operation failed
        (its order id is then cleared: the next submission places a new one under the same key).

        A blocked reservation refused again is audited and its ``status_reason`` rewritten only when the refusal
        differs from the one holding it (another permission, a policy): the reader sees the refusal that holds it
        now, and a pass that finds nothing new writes nothing (the reconciler's answer still lists it)."""
        status = S(row.status)
        reason = f"{refused.code}: {refused.message}"[:500]
        target = S.BLOCKED if refused.blocked else S.APPROVED if refused.retryable else S.CANCELLED
        same = status is S.BLOCKED and target is S.BLOCKED and not order_failed
        if same and row.status_reason == reason:
            return  # still held by the same refusal: audited when it first held it
        detail = {"code": refused.code, "message": refused.message[:300], "retryable": refused.retryable,
                  "blocked": refused.blocked}  # fmt: skip
        uow.audit(
            at_s=now_s,
            actor=actor_id,
            action="reservation.submission_refused",
            entity="reservation",
            entity_id=row.id,
            detail=detail,
        )
        if status not in ((S.SUBMITTED,) if order_failed else (S.APPROVED, S.BLOCKED)):
            return  # changed meanwhile (another process submitted it): this refusal is not its state
        if same:  # held by another refusal now: the reason the reader sees is this one
            uow.update_versioned(ReservationRow, row, {"status_reason": reason}, f"reservation {row.id}")
            uow.session.expire(row)
            return
        why = f"provider refused: {refused.code}" if refused.code != START_PASSED else "start passed before submit"
        if target is status:
            return  # still approved: audited above, nothing to change
        res = domain_of(row)
        res.transition(target, at_s=now_s, actor=actor_id, reason=why)
        persist_status(uow, row, res, now_s, actor_id, order_failed=order_failed,
                       status_reason=None if target is S.APPROVED else reason)  # fmt: skip

    def reconcile(self, *, actor_id: str = "reconciler") -> ReconcileReport:
        """Bring the store in line with the provider (run at startup and periodically, or by an admin's request:
        ``actor_id`` names who asked, and the submissions the pass makes are audited under it).

        approved / blocked -> submitted (finding or placing the order under the same key). Then, with a provider whose
        orders have a lifecycle of their own (:class:`ProviderLifecycle`, e.g. AWS), the provider's state decides
        and the clock does not: submitted -> active when it reports the order active, -> expired when expired,
        -> cancelled when cancelled; an active commitment the provider reports cancelled ends as expired (the table
        allows no active -> cancelled). A submitted order whose operation failed after ``submit`` answered (GCP's
        insert outliving ``op_wait_s``) is handled as that refusal at submission would be: back to approved (about the
        moment: placed again by a later pass), blocked (a permission or policy), or cancelled with the provider's
        code. With the simulated provider, the clock decides: submitted -> active once the start time has passed;
        active -> expired at the end of the term.
        """
        report = ReconcileReport()
        with UnitOfWork(self._engine, write=False) as uow:
            approved = uow.session.scalars(
                select(ReservationRow.id).where(ReservationRow.status.in_(WAITING)).order_by(ReservationRow.id)
            ).all()
        for rid in approved:
            try:
                view, refused = self._submit(rid, actor_id=actor_id)
            except GpufleetError as exc:  # this one's error is its own: the others are still submitted and followed
                log.warning("reservation %s not submitted: %s", rid, exc)
                report.errors.append({"reservation_id": rid, "error": str(exc)[:300]})
                continue
            if refused is not None and view.status in (S.APPROVED, S.BLOCKED):  # refused for now: say why it waits
                log.warning("reservation %s not submitted: %s", rid, refused)
                report.errors.append({"reservation_id": rid, "error": str(refused)[:300]})
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
                res = domain_of(row)
                if res.status is S.SUBMITTED and row.start_s <= now_s:
                    res.transition(S.ACTIVE, at_s=now_s, actor="reconciler", reason="start reached")
                    persist_status(uow, row, res, now_s, "reconciler")
                    report.activated.append(row.id)
                    res = domain_of(row)
                if res.status is S.ACTIVE and row.start_s + term_seconds(row.term_months) <= now_s:
                    res.transition(S.EXPIRED, at_s=now_s, actor="reconciler", reason="term ended")
                    persist_status(uow, row, res, now_s, "reconciler")
                    report.expired.append(row.id)
            uow.commit()
        return report

    def _follow_provider(self, provider: ProviderLifecycle, report: ReconcileReport) -> None:
        """Describe the submitted and active orders (outside any transaction) with gpufleet's record of each (its
        term's end, the operation still running when it was submitted), then apply the states."""
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.execute(
                select(ReservationRow.id, ReservationRow.provider_order_id, ReservationRow.start_s,
                       ReservationRow.term_months, ReservationRow.provider_operation_id,
                       ReservationRow.region_id, ReservationRow.sku_id, ReservationRow.units).where(
                    ReservationRow.status.in_([S.SUBMITTED.value, S.ACTIVE.value]),
                    ReservationRow.provider_order_id.is_not(None),
                )
            ).all()  # fmt: skip
        orders = {rid: str(oid) for rid, oid, *_ in rows}
        records = {str(oid): OrderRecord(start_s + term_seconds(months), op, region, sku, units, start_s)
                   for _, oid, start_s, months, op, region, sku, units in rows}  # fmt: skip
        if not orders:
            return
        states = provider.describe(sorted(orders.values()), records)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            for rid in sorted(orders):
                seen = states.get(orders[rid])
                if seen is None:  # unknown to the provider (or another region): leave it, never guess
                    continue
                if seen.warning:  # listed on every pass while it lasts: the answer is the picture now
                    report.warnings.append(f"{rid}: {seen.warning}"[:500])
                row = lock_row(uow, rid)
                if row.provider_order_id != orders[rid]:
                    continue
                self._mismatch_changed(uow, rid, orders[rid], seen.warning, now_s)
                if seen.ended:  # the adapter ended the order at the provider itself: the record's term is over
                    uow.audit(at_s=now_s, actor="reconciler", action="reservation.ended_at_term", entity="reservation",
                              entity_id=rid, detail={"order_id": orders[rid], "provider_state": seen.provider_state,
                                                     "found": seen.ended[:500]})  # fmt: skip
                self._apply_provider_state(uow, row, seen, now_s, report)
            uow.commit()

    @staticmethod
    def _mismatch_changed(uow: UnitOfWork, rid: str, order_id: str, warning: str, now_s: int) -> None:
        """Log and audit (``reservation.provider_mismatch``) what the provider holds against the record once per
        change: when it appears, changes, or clears (``warning`` ""); a pass that finds the same says nothing more."""
        last = uow.session.scalars(
            select(AuditEventRow.detail_json)
            .where(AuditEventRow.entity_id == rid, AuditEventRow.action == MISMATCH)
            .order_by(AuditEventRow.id.desc())
            .limit(1)
        ).first()
        try:
            before = "" if last is None else str(json.loads(last).get("warning", ""))
        except (ValueError, AttributeError):
            before = ""
        if before == warning[:500]:
            return
        if warning:
            log.warning("reservation %s: %s", rid, warning)
        else:
            log.info("reservation %s: the provider holds it as recorded again", rid)
        uow.audit(at_s=now_s, actor="reconciler", action=MISMATCH, entity="reservation", entity_id=rid,
                  detail={"order_id": order_id, "warning": warning[:500]})  # fmt: skip

    def _apply_provider_state(
        self, uow: UnitOfWork, row: ReservationRow, seen: OrderState, now_s: int, report: ReconcileReport
    ) -> None:
        status = S(row.status)
        if seen.state == "failed":
            if status is S.SUBMITTED and seen.refusal is not None:  # its operation failed: as a refusal at submission
                self._refused(uow, row, seen.refusal, now_s, "reconciler", order_failed=True)
                after = S(row.status)
                if after is S.CANCELLED:
                    report.cancelled.append(row.id)
                else:
                    report.errors.append({"reservation_id": row.id, "error": str(seen.refusal)[:300]})
            return
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
            res = domain_of(row)
            res.transition(target, at_s=now_s, actor="reconciler", reason=why)
            # an order the adapter ended itself (``seen.ended``): its reason says what gpufleet did
            persist_status(
                uow, row, res, now_s, "reconciler", status_reason=(seen.reason or None) if seen.ended else None
            )
            bucket.append(row.id)
