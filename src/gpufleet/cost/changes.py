"""Rightsizing changes: a record that can be applied and rolled back, with ONE transition table and ONE gate.

The change carries both specs, so rollback needs nothing but the record. Applying or rolling back checks that the
workload still has the spec the change expects (optimistic concurrency): a spec edited since is a conflict, not a
silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.cost.rightsizing import Recommendation, ResourceSpec
from gpufleet.domain.errors import ConflictError, InvalidTransition
from gpufleet.domain.reservations import StatusChange


class ChangeStatus(StrEnum):
    PROPOSED = "proposed"
    APPLIED = "applied"
    ROLLED_BACK = "rolled_back"
    CANCELLED = "cancelled"


C = ChangeStatus

CHANGE_TRANSITIONS: dict[ChangeStatus, frozenset[ChangeStatus]] = {
    # recorded by the API (202 + change_id); the control loop applies it, or a person cancels it first
    C.PROPOSED: frozenset({C.APPLIED, C.CANCELLED}),
    # applied changes can be undone once; re-applying means recording a new change
    C.APPLIED: frozenset({C.ROLLED_BACK}),
    C.ROLLED_BACK: frozenset(),
    C.CANCELLED: frozenset(),
}


@dataclass(slots=True)
class RightsizingChange:
    change_id: str
    ticket: str
    workload_id: str
    before: ResourceSpec
    after: ResourceSpec
    reasons: tuple[str, ...]
    status: ChangeStatus = C.PROPOSED
    history: list[StatusChange[ChangeStatus]] = field(default_factory=list)

    @classmethod
    def from_recommendation(cls, rec: Recommendation, change_id: str, ticket: str) -> RightsizingChange:
        return cls(change_id, ticket, rec.workload_id, rec.current, rec.recommended, rec.reasons)

    def transition(self, target: ChangeStatus, *, at_s: int, actor: str, reason: str = "") -> None:
        """The one gate for status changes."""
        if target not in CHANGE_TRANSITIONS[self.status]:
            raise InvalidTransition(f"change {self.change_id}", self.status.value, target.value)
        self.history.append(StatusChange(at_s, self.status, target, actor, reason))
        self.status = target


def apply_change(spec: ResourceSpec, change: RightsizingChange, *, at_s: int, actor: str) -> ResourceSpec:
    """Return the new spec and mark the change applied. ``spec`` must be the change's ``before``."""
    if change.status is not C.PROPOSED:
        raise InvalidTransition(f"change {change.change_id}", change.status.value, C.APPLIED.value)
    if spec != change.before:
        raise ConflictError(f"change {change.change_id}: workload {change.workload_id} spec changed since proposal")
    change.transition(C.APPLIED, at_s=at_s, actor=actor, reason="rightsizing_applied")
    return change.after


def rollback_change(
    spec: ResourceSpec, change: RightsizingChange, *, at_s: int, actor: str, reason: str
) -> ResourceSpec:
    """Return the spec from before the change and mark it rolled back. ``spec`` must be the change's ``after``."""
    if change.status is not C.APPLIED:
        raise InvalidTransition(f"change {change.change_id}", change.status.value, C.ROLLED_BACK.value)
    if spec != change.after:
        raise ConflictError(f"change {change.change_id}: workload {change.workload_id} spec changed since apply")
    change.transition(C.ROLLED_BACK, at_s=at_s, actor=actor, reason=reason)
    return change.before
