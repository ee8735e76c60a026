"""Reservations: capacity commitments, with ONE transition table and ONE gate.

Every status change goes through :meth:`Reservation.transition`, which checks the table and appends to
the reservation's history. A test walks every edge, allowed and refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Generic, TypeVar

from gpufleet.domain.errors import InvalidTransition, ValidationError


class ReservationStatus(StrEnum):
    DRAFT = "draft"
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"
    BLOCKED = "blocked"
    SUBMITTED = "submitted"
    ACTIVE = "active"
    EXPIRED = "expired"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


S = ReservationStatus

TRANSITIONS: dict[ReservationStatus, frozenset[ReservationStatus]] = {
    # a draft is proposed by a planner or a person; it goes up for approval or is dropped
    S.DRAFT: frozenset({S.PENDING_APPROVAL, S.APPROVED, S.CANCELLED}),
    # approvers decide; under the spend threshold one approval suffices, above it two
    S.PENDING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED}),
    # approved orders are sent to the provider (idempotently); still cancellable before submission
    S.APPROVED: frozenset({S.SUBMITTED, S.BLOCKED, S.CANCELLED}),
    # held: a permission or policy on our side refused the order; tried on each pass, resumed once it is fixed
    S.BLOCKED: frozenset({S.SUBMITTED, S.APPROVED, S.CANCELLED}),
    # the provider took the order (its operation may still run); capacity becomes usable after the lead time. An
    # order whose operation then fails goes back to approved (about the moment: placed again) or blocked
    S.SUBMITTED: frozenset({S.ACTIVE, S.APPROVED, S.BLOCKED, S.CANCELLED}),
    # a commitment runs for its term; it cannot be cancelled, only expire
    S.ACTIVE: frozenset({S.EXPIRED}),
    # terminal states
    S.EXPIRED: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
}

TERMS_MONTHS: frozenset[int] = frozenset({1, 3, 6, 12, 24, 36})
# A commitment that starts more than ten years ahead is a typo (year 9999), not a plan.
MAX_START_AHEAD_S = 3650 * 86_400


StatusT = TypeVar("StatusT", bound=StrEnum)


@dataclass(frozen=True)  # no slots: on 3.11 a slotted frozen Generic raises TypeError on StatusChange[X](...)
class StatusChange(Generic[StatusT]):
    """One step through a transition table (any status enum: a reservation's, a rightsizing change's): the
    history entry each gate appends."""

    at_s: int
    source: StatusT
    target: StatusT
    actor: str
    reason: str


@dataclass(slots=True)
class Reservation:
    """A commitment of ``units`` GPUs of one SKU in a pool for ``term_months`` from ``start_s``."""

    id: str
    pool_id: str
    sku_id: str
    units: int
    start_s: int
    term_months: int
    price_usd_per_gpu_h: Decimal
    status: ReservationStatus = S.DRAFT
    approvals: list[str] = field(default_factory=list)
    history: list[StatusChange[ReservationStatus]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.units <= 0:
            raise ValidationError("units", f"must be > 0, got {self.units}")
        if self.term_months not in TERMS_MONTHS:
            raise ValidationError("term_months", f"must be one of {sorted(TERMS_MONTHS)}, got {self.term_months}")

    @property
    def term_s(self) -> int:
        return term_seconds(self.term_months)

    @property
    def end_s(self) -> int:
        return self.start_s + self.term_s

    @property
    def est_cost_usd(self) -> Decimal:
        hours = Decimal(self.term_s) / 3600
        return (self.price_usd_per_gpu_h * self.units * hours).quantize(Decimal("0.01"))

    def can_transition(self, target: ReservationStatus) -> bool:
        return target in TRANSITIONS[self.status]

    def transition(self, target: ReservationStatus, *, at_s: int, actor: str, reason: str = "") -> None:
        """The one gate for status changes: refuse edges not in the table, record every change."""
        if not self.can_transition(target):
            raise InvalidTransition(f"reservation {self.id}", self.status.value, target.value)
        self.history.append(StatusChange(at_s, self.status, target, actor, reason))
        self.status = target


def term_seconds(term_months: int) -> int:
    """A month is 730 hours (8,760 / 12), the convention cloud price lists use."""
    return term_months * 730 * 3600


def approvals_required(est_cost_usd: Decimal, threshold_usd: Decimal) -> int:
    """Reservations above the spend threshold need two distinct approvers, others one."""
    return 2 if est_cost_usd > threshold_usd else 1
