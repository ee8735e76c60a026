"""Review (k8s): consolidation's moves ledger across leaders (``control/move_budget.py``,
``adapters/kubernetes/move_ledger.py``)."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.move_ledger import ledger_times, ledger_value
from gpufleet.control.move_budget import HOUR_S, moves_in_hour, reserve, settle

NOW = 1_764_550_800


def test_reserved_moves_count_and_the_ones_not_made_are_given_back() -> None:
    """Review (fixed, with the ledger): a round's reservation counts in the hour at once; after it, only the moves
    not made are given back (another round's entries of the same second are not touched beyond that); entries older
    than the hour drop out."""
    old = [NOW - HOUR_S - 5, NOW - 600]
    got = reserve(old, NOW, 3)
    assert got == [NOW - 600, NOW, NOW, NOW] and moves_in_hour(got, NOW) == 4
    assert settle(got, NOW, 3, 1, NOW) == [NOW - 600, NOW]
    assert settle(got, NOW, 3, 3, NOW) == got
    assert moves_in_hour([NOW + 30], NOW) == 1  # another controller's clock ahead of this one's: counted


def test_the_ledger_annotation_round_trips_and_garbage_is_ignored() -> None:
    """Review (fixed, with the ledger): RFC 3339 times, comma-separated; an entry that is not a time is left out."""
    value = ledger_value([NOW, NOW + 60])
    assert value == "2025-12-01T01:00:00Z,2025-12-01T01:01:00Z"
    assert ledger_times(value) == [NOW, NOW + 60]
    assert ledger_times(value + ",soon,") == [NOW, NOW + 60]
    assert ledger_times(None) == [] and ledger_times(7) == []
