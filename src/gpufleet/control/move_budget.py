"""Consolidation's moves in the last hour, across leaders (pure; no I/O).

``--max-moves-per-hour`` bounds the evictions consolidation makes in any hour. A leader's own audit counts only its
own evictions; a failover (or a restart) would allow the limit again in the same hour. So the moves are also kept in a
ledger outside the leader (``adapters/kubernetes/move_ledger.py``: an annotation on the Lease's Namespace), as the
Unix seconds of each move: a round reserves its planned moves there before it evicts (:func:`reserve`: a leader that
dies mid-round leaves them counted) and settles them after (:func:`settle`: the moves its budget refused or that
failed are given back). Each round counts the larger of its own evictions and the ledger's moves in the hour
(:func:`moves_in_hour`).
"""

from __future__ import annotations

from collections.abc import Sequence

HOUR_S = 3600
KEEP = 1000  # entries the ledger keeps at most (the newest): far above any sane --max-moves-per-hour


def _kept(times: Sequence[int], now: float) -> list[int]:
    return sorted(t for t in times if t > now - HOUR_S)[-KEEP:]


def moves_in_hour(times: Sequence[int], now: float) -> int:
    """The moves of ``times`` in the hour before ``now`` (one stamped later than ``now``, another controller's clock
    ahead of this one's, counts too)."""
    return sum(1 for t in times if t > now - HOUR_S)


def reserve(times: Sequence[int], now: float, moves: int) -> list[int]:
    """The ledger with ``moves`` moves stamped ``now`` (a round's plan, before it evicts); entries older than the hour
    dropped."""
    return _kept([*times, *([int(now)] * max(0, moves))], now)


def settle(times: Sequence[int], at: int, reserved: int, applied: int, now: float) -> list[int]:
    """The ledger after a round that reserved ``reserved`` moves stamped ``at`` and applied ``applied``: the moves
    not made are given back (as many entries stamped ``at`` removed); entries older than the hour dropped."""
    give_back = max(0, reserved - applied)
    out: list[int] = []
    for t in sorted(times, reverse=True):
        if give_back and t == at:
            give_back -= 1
            continue
        out.append(t)
    return _kept(out, now)
