"""Consolidation's hourly budget as the controller applies it: its own evictions and the moves ledger other leaders
left (``move_ledger.py``; the counting in ``control/move_budget.py``), and one round of drains that reserves its moves
in the ledger before it evicts and settles them after."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.move_ledger import MoveLedger
from gpufleet.adapters.kubernetes.reclaim import apply_reclaim
from gpufleet.control.move_budget import HOUR_S, moves_in_hour, reserve, settle
from gpufleet.control.preempting import PREEMPT_REASON
from gpufleet.control.reclaim import ReclaimPlan


def _own_moves(act: Actuator, since: float, pods: frozenset[str] | None = None) -> int:
    """Consolidation's evictions applied by ``act`` since ``since`` (preemption's are not moves), of ``pods`` only
    when given."""
    return sum(1 for a in list(act.audit) if a["action"] == "evict" and a["outcome"] == "applied"
               and a["reason"] != PREEMPT_REASON and float(a["at_s"]) >= since
               and (pods is None or a["target"] in pods))  # fmt: skip


def moves_last_hour(act: Actuator, ledger: MoveLedger, now: float) -> int:
    """The moves consolidation made in the hour before ``now``: the larger of this controller's own evictions and the
    ledger's moves (any leader's, this one's included); the own count alone when the ledger cannot be read."""
    own = _own_moves(act, now - HOUR_S + 1e-9)
    times = ledger.read()
    return own if times is None else max(own, moves_in_hour(times, now))


def drain_round(
    act: Actuator, ledger: MoveLedger, plan: ReclaimPlan, now: float, *, checkpoint_timeout_s: float,
    grace_s: int | None,
) -> dict[str, str]:  # fmt: skip
    """Apply ``plan``'s drains (``apply_reclaim``), its moves reserved in the ledger first (a leader that dies
    mid-round leaves them counted) and the ones not made given back after. A ledger write that fails is audited and
    the round goes on: the moves then count in this controller's own audit only."""
    planned = sum(len(d.evict) for d in plan.drains)
    at = int(now)
    ledger.update(lambda times: reserve(times, now, planned), "moves_reserved")
    pods = frozenset(p for d in plan.drains for p in d.evict)
    try:
        return apply_reclaim(act, plan, checkpoint_timeout_s=checkpoint_timeout_s, grace_s=grace_s)
    finally:
        made = _own_moves(act, at, pods)
        if made < planned:
            ledger.update(lambda times: settle(times, at, planned, made, act.clock()), "moves_settled")
