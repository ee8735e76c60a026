"""Priority preemption inside the binding planner: :meth:`BindingPlanner.preempt
<gpufleet.control.binding.BindingPlanner.preempt>` asks :func:`plan_preemptions` (the rules in
``control/preempting.py``) for the pods and gangs the plan left unschedulable.

A :class:`~gpufleet.control.preempting.PreemptDecision` names victims to evict. The room they free is *reserved* at
once: the preemptor holds it in the planner's table (in flight) and the victims hold nothing more, so no other pod
is given it. Once every victim is gone from the observation (deleted, or Succeeded/Failed: a pod still terminating
keeps its GPUs on the node), ``BindingPlanner.plan`` binds the preemptor there (reason ``preempted_room``).
``BindingPlanner.cancel`` drops a reservation whose evictions failed (victims a budget refused are barred a while:
``RefusalBackoff``); one older than ``preempt_cfg.hold_s`` is dropped by ``plan`` (reason ``reservation_expired``
in ``dropped``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.control.observation import Observation
from gpufleet.control.preempting import NOT_PREEMPTIBLE, NoPreempt, PreemptDecision, candidates, plan_gang, plan_single
from gpufleet.control.scheduling import FleetScheduler, RunningJob

if TYPE_CHECKING:
    from gpufleet.control.binding import BindingPlanner, Unschedulable


@dataclass(slots=True)
class _Reservation:
    decision: PreemptDecision
    members: tuple[tuple[str, str, str], ...]  # (pod key, uid, gang) of the preemptor(s)
    victims: frozenset[str]  # uids
    at_s: float


def plan_preemptions(
    planner: BindingPlanner, obs: Observation, unschedulable: tuple[Unschedulable, ...], max_decisions: int | None
) -> tuple[tuple[PreemptDecision, ...], tuple[NoPreempt, ...]]:
    """:meth:`BindingPlanner.preempt <gpufleet.control.binding.BindingPlanner.preempt>`: the decisions for
    ``unschedulable`` in their order, each one's room reserved in ``planner`` (module docstring)."""
    cfg = planner.preempt_cfg
    limit = cfg.max_decisions if max_decisions is None else max_decisions
    sched = planner._sched
    if not cfg.enabled or sched is None or limit <= 0:
        return (), ()
    table = sched.table
    pods = {p.key: p for p in obs.pods}
    barred = planner._refusals.barred(obs.now_s, cfg)
    cands, whole = candidates(obs.pods, planner._held, planner._in_flight, barred)
    fs = FleetScheduler("gpufleet", (), (), np.random.default_rng(0), grace_s=cfg.grace_s)
    now = int(obs.now_s)
    done: list[PreemptDecision] = []
    none: list[NoPreempt] = []
    seen: set[str] = set()
    jobs: dict[str, RunningJob] = {}  # the offered pods as the planner sees them, built once
    lowest = min((p.priority for c in cands.values() for p, _ in c), default=None)
    for u in unschedulable:
        if len(done) >= limit or len(seen) >= cfg.max_attempts:
            break
        p = pods.get(u.pod)
        if p is None or u.reason in NOT_PREEMPTIBLE:
            continue
        key = f"{p.namespace}/{p.gang}" if p.gang else p.key
        if key in seen:
            continue
        seen.add(key)
        members = [p]
        if p.gang:
            members = sorted((m for m in obs.pods if m.gang == p.gang and m.namespace == p.namespace
                              and m.active and not m.node), key=lambda m: m.key)  # fmt: skip
        if not all(m.preempts for m in members):  # a gang: any member's Never holds the whole gang back
            none.append(NoPreempt(key, "preemption_policy_never"))
            continue
        if lowest is None or min(m.priority for m in members) <= lowest:
            none.append(NoPreempt(key, "no_eligible_victims"))  # nothing offered ranks below it
            continue
        if p.gang:
            reqs = [planner._request(m, table) for m in members]
            gang_cands = {n: c for n, c in cands.items() if whole.get(n)}
            got = plan_gang(table, key, members, reqs, gang_cands, now, cfg.node_start_s, cfg.grace_s, jobs,
                            cfg.gang_scan_nodes)  # fmt: skip
        else:
            got = plan_single(
                fs, table, p, planner._request(p, table), cands, now, cfg.node_start_s, jobs, cfg.scan_nodes
            )
        if isinstance(got, NoPreempt):
            none.append(got)
            continue
        decision, holds = got
        victims = frozenset(v.uid for v in decision.victims)
        for v in decision.victims:  # their room is the preemptor's now
            h = planner._held.pop(v.uid)
            cands[h.node] = [(q, k) for q, k in cands[h.node] if q.uid != v.uid]
        for n in {h.node for h in holds.values()}:
            whole[n] = False  # holds an in-flight preemptor now
        planner._doomed |= victims
        planner._held.update(holds)
        planner._in_flight.update(holds)
        members_t = tuple((pods[k].key, pods[k].uid, decision.gang) for k in decision.pods)
        planner._reserved[decision.key] = _Reservation(decision, members_t, victims, obs.now_s)
        done.append(decision)
    return tuple(done), tuple(none)
