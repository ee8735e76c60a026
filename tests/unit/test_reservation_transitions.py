"""Every edge of the reservation transition table, allowed and refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.domain.errors import InvalidTransition, ValidationError
from gpufleet.domain.reservations import (
    TRANSITIONS,
    Reservation,
    ReservationStatus,
    approvals_required,
)

ALL = list(ReservationStatus)
EDGES = [(a, b) for a in ALL for b in ALL]


def _at(status: ReservationStatus) -> Reservation:
    r = Reservation("res_1", "pool", "h100_80gb", 8, 0, 12, Decimal("4.36"))
    r.status = status
    return r


@pytest.mark.parametrize(("source", "target"), EDGES, ids=[f"{a}->{b}" for a, b in EDGES])
def test_each_edge_is_allowed_exactly_when_the_table_says(source: ReservationStatus, target: ReservationStatus) -> None:
    r = _at(source)
    if target in TRANSITIONS[source]:
        r.transition(target, at_s=5, actor="alice", reason="test")
        assert r.status is target
        assert r.history[-1].source is source and r.history[-1].target is target
        assert r.history[-1].actor == "alice"
    else:
        with pytest.raises(InvalidTransition):
            r.transition(target, at_s=5, actor="alice")
        assert r.status is source
        assert r.history == []


def test_happy_path_reaches_expired_and_records_history() -> None:
    r = _at(ReservationStatus.DRAFT)
    path = ["pending_approval", "approved", "submitted", "active", "expired"]
    for i, s in enumerate(path):
        r.transition(ReservationStatus(s), at_s=i, actor="sys")
    assert [h.target.value for h in r.history] == path


def test_terminal_states_have_no_exit() -> None:
    for s in ("expired", "rejected", "cancelled"):
        assert TRANSITIONS[ReservationStatus(s)] == frozenset()


def test_active_commitment_cannot_be_cancelled() -> None:
    with pytest.raises(InvalidTransition):
        _at(ReservationStatus.ACTIVE).transition(ReservationStatus.CANCELLED, at_s=0, actor="x")


def test_bad_units_and_terms_name_the_field() -> None:
    with pytest.raises(ValidationError) as e:
        Reservation("r", "p", "h100_80gb", 0, 0, 12, Decimal(1))
    assert e.value.field == "units"
    with pytest.raises(ValidationError) as e2:
        Reservation("r", "p", "h100_80gb", 1, 0, 7, Decimal(1))
    assert e2.value.field == "term_months"


def test_two_approvers_above_threshold_one_below() -> None:
    assert approvals_required(Decimal("100001"), Decimal("100000")) == 2
    assert approvals_required(Decimal("100000"), Decimal("100000")) == 1
