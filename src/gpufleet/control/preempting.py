"""Priority preemption on an observed cluster: the simulator's planner, asked for pods the binding plan left waiting.

:class:`BindingPlanner.preempt <gpufleet.control.binding.BindingPlanner.preempt>` calls :func:`plan_single` for
a pod and :func:`plan_gang` for a gang that did not fit; both ask the schedule package's preemption planner
(:mod:`gpufleet.schedule.preemption`) the simulator's loop asks, under the loop's rules:

- only strictly lower priority is a victim, serving is never a victim of training, a pod younger than its
  minimum runtime is protected (:func:`~gpufleet.schedule.preemption.exclusion`);
- the victims' lost GPU-hours (checkpoint-aware, :func:`~gpufleet.schedule.preemption.eviction_loss_gpu_h`) must
  be below what the preemptor's GPUs would idle waiting ``node_start_s`` for a new node (reason
  ``waiting_is_cheaper``): :meth:`gpufleet.control.scheduling.FleetScheduler.preempt` for a single pod, the same
  gate as :meth:`~gpufleet.control.scheduling.FleetScheduler.preempt_gang` for a gang;
- a single pod's victims sit on one node, cheapest GPU-hours first (:func:`plan_preemption`); a gang empties
  whole nodes, cheapest first, as few as it needs (:func:`plan_gang_preemption`, tried with 1, 2, ... nodes). Any
  member may land on an emptied node, so the gang's priority is its lowest member's (every victim is strictly
  below every member) and a gang preempts only if none of its members has ``preemptionPolicy: Never``.

Victims offered (:func:`offerable`): bound, active, whole-GPU pods that are not members of a gang (stopping one
worker stops its gang) and not node-bound (DaemonSet, static pods). What the planner reads of a victim
(:func:`running_job`): ``priority``, ``kind`` (label ``gpufleet.io/kind``), ``checkpointable``, its start
(``status.startTime``) and the annotations ``gpufleet.io/last-checkpoint-s`` (Unix time of its last checkpoint),
``gpufleet.io/min-runtime-s`` and ``gpufleet.io/restart-s`` (unreadable, infinite or negative values count as
absent). A start-buffer placeholder (``control/buffer_pods.py``, priority below every real pod) is a victim whose
eviction loses nothing.

A victim whose PodDisruptionBudget refused its eviction (the world reports it: ``BindingPlanner.cancel`` with
``refused``) is offered to no preemptor for ``PreemptConfig.refused_s``, doubled with each refusal in a row up to
``refused_max_s`` (:class:`RefusalBackoff`): the budget may allow it later (more replicas ready), but asking again
every tick is a tight eviction loop against it, and other victims may free the room meanwhile.

These functions work on the binding planner's node table: they release the victims' holdings, check that the
preemptor then fits the node (CPU, memory, GPUs, selector, taints: the table's own feasibility) and allocate the
preemptor there, or restore the table and answer :class:`NoPreempt` with a reason code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from gpufleet.control.observation import ObservedPod
from gpufleet.control.scheduling import FleetScheduler, PodAsk
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.gang import GangPlacement, GangRequest, place_gang
from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.preemption import (
    NoPreemption,
    PreemptRequest,
    RunningJob,
    plan_gang_preemption,
)
from gpufleet.schedule.table import MILLI, NodeTable, PodRequest

A_LAST_CHECKPOINT = "gpufleet.io/last-checkpoint-s"
A_MIN_RUNTIME = "gpufleet.io/min-runtime-s"
A_RESTART = "gpufleet.io/restart-s"
PREEMPT_REASON = "preempt_for_priority"
# the binding plan's reasons after which no eviction can help (a gang still missing members, no node at all, no
# node with the labels, taints, GPU model or count the pod needs)
NOT_PREEMPTIBLE = frozenset(
    {"gang_incomplete", "no_schedulable_nodes", "no_node_matches_selector_or_tolerations",
     "no_node_with_gpu_model_and_count"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PreemptConfig:
    """``grace_s``: the checkpoint grace a victim is given (the plan's cost, as the loop's ``preempt_grace_s``);
    ``node_start_s``: how long the preemptor would wait for a new node (the price of waiting); ``hold_s``: a
    reservation whose victims are not gone after this long is dropped; ``max_decisions`` and ``max_attempts``:
    decisions made and pods or gangs asked about per call, in the plan's order (priority first)."""

    enabled: bool = True
    grace_s: int = 120
    node_start_s: int = 600
    hold_s: float = 900.0
    max_decisions: int = 4
    max_attempts: int = 32  # pods and gangs asked about per call (the planner's work per tick stays bounded)
    scan_nodes: int = 32  # nodes offered for one pod, the most free GPUs first (the simulator's PREEMPT_SCAN_NODES)
    gang_scan_nodes: int = 64  # busy nodes offered for one gang, likewise (the simulator's GANG_SCAN_NODES)
    refused_s: float = 60.0  # a victim its PodDisruptionBudget refused is offered again after this long ...
    refused_max_s: float = 600.0  # ... doubled with each refusal in a row, up to this (RefusalBackoff)


@dataclass(slots=True)
class RefusalBackoff:
    """The victims their PodDisruptionBudget refused (pod uid -> (barred until, refusals in a row)): a refused
    victim is barred ``refused_s`` x 2^(refusals in a row - 1), at most ``refused_max_s``. A refusal more than
    ``refused_max_s`` after the last bar ended starts a new row; such an entry is forgotten (the memory stays
    bounded by the refusals of the last few minutes)."""

    _barred: dict[str, tuple[float, int]] = field(default_factory=dict)

    def refused(self, uid: str, at_s: float, cfg: PreemptConfig) -> None:
        until, row = self._barred.get(uid, (0.0, 0))
        if at_s - until > cfg.refused_max_s:
            row = 0
        self._barred[uid] = (at_s + min(cfg.refused_s * 2**row, cfg.refused_max_s), row + 1)

    def barred(self, now_s: float, cfg: PreemptConfig) -> frozenset[str]:
        """The uids barred at ``now_s`` (forgetting the entries past their row)."""
        for uid in [u for u, (until, _) in self._barred.items() if now_s - until > cfg.refused_max_s]:
            del self._barred[uid]
        return frozenset(u for u, (until, _) in self._barred.items() if now_s < until)


@dataclass(frozen=True, slots=True)
class TableHold:
    """What a pod holds in the node table."""

    node: int
    request: PodRequest
    slots: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Victim:
    pod: str  # namespace/name
    uid: str
    node: str
    action: Literal["checkpoint_then_stop", "stop"]
    grace_s: int
    lost_gpu_h: float


@dataclass(frozen=True, slots=True)
class PreemptDecision:
    """Evict ``victims``; then bind the preemptor ``pods`` (one, or every member of ``gang``) on ``nodes`` (one
    per pod, same order). ``plan_reason``: the planner's (``preempt_lowest_loss`` / ``gang_lowest_loss``)."""

    key: str  # the preemptor: a pod's namespace/name, or namespace/gang
    pods: tuple[str, ...]
    nodes: tuple[str, ...]
    victims: tuple[Victim, ...]
    lost_gpu_h: float
    priority: int
    plan_reason: str
    gang: str = ""
    reason: str = PREEMPT_REASON


@dataclass(frozen=True, slots=True)
class NoPreempt:
    key: str
    reason: str  # the planner's NoPreemption reason, waiting_is_cheaper, not_whole_gpus, ... (module docstring)


def _ann_int(p: ObservedPod, key: str) -> int | None:
    """The annotation as whole seconds; None when absent or no reading: not a number, not finite, or negative (a
    duration or a Unix time below zero would make an eviction look cheaper than free)."""
    raw = p.annotation(key)
    try:
        v = float(raw) if raw else math.nan
    except ValueError:
        return None
    return int(v) if math.isfinite(v) and v >= 0 else None


def kind_of(p: ObservedPod) -> WorkloadKind:
    """Serving when labelled so; every other pod is training for the planner's rules (batch included)."""
    return WorkloadKind.SERVING if p.kind == "serving" else WorkloadKind.TRAINING


def offerable(p: ObservedPod) -> bool:
    """A pod the planner may name as a victim (module docstring); its priority etc. are the planner's rules."""
    r = p.request
    return (
        p.active
        and bool(p.node)
        and not p.gang
        and p.owner_kind not in ("DaemonSet", "Node")
        and r.num_gpu > 0
        and r.gpu_milli == MILLI
    )


def running_job(p: ObservedPod, node: int, now_s: int) -> RunningJob:
    """The bound pod as the preemption planner sees it (module docstring); an unknown start counts as now. A
    start-buffer placeholder (``ObservedPod.buffer``) loses nothing: checkpointed now, stopped at once."""
    started = int(p.started_s) if p.started_s is not None else now_s
    if p.buffer:
        return RunningJob(p.uid, kind_of(p), p.priority, node, p.request.num_gpu, started, last_checkpoint_s=now_s)
    return RunningJob(
        p.uid, kind_of(p), p.priority, node, p.request.num_gpu, started,
        last_checkpoint_s=_ann_int(p, A_LAST_CHECKPOINT), checkpointable=p.checkpointable,
        min_runtime_s=_ann_int(p, A_MIN_RUNTIME) or 0, restart_s=_ann_int(p, A_RESTART) or 0,
    )  # fmt: skip


def cached_job(cache: dict[str, RunningJob], p: ObservedPod, node: int, now_s: int) -> RunningJob:
    """:func:`running_job`, built once per pod for one planning call (``cache``: the call's, by uid)."""
    got = cache.get(p.uid)
    if got is None:
        got = cache[p.uid] = running_job(p, node, now_s)
    return got


def could_fit(table: NodeTable, req: PodRequest) -> npt.NDArray[np.bool_]:
    """Nodes ``req`` fits once emptied: capacity, GPU model and count, selector and taints."""
    ok = (table.cpu_cap_milli >= req.cpu_milli) & (table.mem_cap_mib >= req.memory_mib)
    ok &= table.gpu_count >= req.num_gpu
    if req.gpu_models:
        ok &= table.model_ok(req.gpu_models)
    out: npt.NDArray[np.bool_] = ok & table.placement_ok(req)
    return out


Candidates = Mapping[int, Sequence[tuple[ObservedPod, TableHold]]]  # node -> offerable pods on it and their holds


def candidates(
    pods: Sequence[ObservedPod], held: Mapping[str, TableHold], in_flight: Set[str], barred: Set[str] = frozenset()
) -> tuple[dict[int, list[tuple[ObservedPod, TableHold]]], dict[int, bool]]:
    """The offerable bound pods per node with their holds (``held``: pod uid -> its holding in the table; pods
    ``in_flight`` are not bound yet; pods ``barred``, refused by their budget lately, are not offered), and per node
    whether every holding on it is an offerable pod (a node a gang may empty)."""
    by_uid = {p.uid: p for p in pods}
    cands: dict[int, list[tuple[ObservedPod, TableHold]]] = {}
    whole: dict[int, bool] = {}
    for uid, h in held.items():
        p = by_uid.get(uid)
        ok = p is not None and uid not in in_flight and uid not in barred and offerable(p)
        whole[h.node] = whole.get(h.node, True) and ok
        if ok and p is not None:
            cands.setdefault(h.node, []).append((p, h))
    return cands, whole


def _victims(
    evictions: Sequence[tuple[str, str, float, int]],
    by_uid: Mapping[str, tuple[ObservedPod, TableHold]],
    names: list[str],
) -> tuple[Victim, ...]:
    out = []
    for uid, action, lost, grace in evictions:
        p, h = by_uid[uid]
        out.append(Victim(p.key, uid, names[h.node], action, grace, lost))  # type: ignore[arg-type]
    return tuple(out)


def plan_single(
    sched: FleetScheduler,
    table: NodeTable,
    pod: ObservedPod,
    req: PodRequest,
    cands: Candidates,
    now_s: int,
    wait_s: int,
    cache: dict[str, RunningJob] | None = None,
    scan_nodes: int = 32,
) -> tuple[PreemptDecision, dict[str, TableHold]] | NoPreempt:
    """Free one node for ``pod`` (module docstring). On a decision the table holds ``pod`` where the victims were
    (their holdings released); returns the decision and the preemptor's new hold. Else the table is unchanged."""
    if req.num_gpu <= 0 or req.gpu_milli != MILLI:
        return NoPreempt(pod.key, "not_whole_gpus")
    jobs = {} if cache is None else cache
    fit = could_fit(table, req)
    lower = ((n, [(p, h) for p, h in c if p.priority < pod.priority]) for n, c in cands.items() if fit[n])
    offered = sorted(((n, c) for n, c in lower if c), key=lambda nc: (-int(table.free_gpus[nc[0]]), nc[0]))
    # offered: lower priority only (the planner applies every rule again), on the nodes closest to fitting
    nodes = dict(offered[:scan_nodes])
    ask = PodAsk(0, 0, req.num_gpu, int(table.gpu_count.max()), (), pod.priority, kind_of(pod) is WorkloadKind.SERVING)
    why = "no_eligible_victims"
    for _ in range(3):  # a node the GPUs choose may lack CPU or memory: drop it and ask again
        if not nodes:
            return NoPreempt(pod.key, why)
        by_uid = {p.uid: (p, h) for c in nodes.values() for p, h in c}
        running = [cached_job(jobs, p, n, now_s) for n, c in nodes.items() for p, _ in c]
        free = {n: int(table.free_gpus[n]) for n in nodes}
        plan = sched.preempt(ask, running, free, now_s, wait_s)
        if isinstance(plan, NoPreemption):
            return NoPreempt(pod.key, plan.reason)
        node = plan.node
        for e in plan.evictions:
            h = by_uid[e.job_id][1]
            table.release(h.node, h.request, h.slots)
        if table.feasible(req)[node]:
            slots = best_fit_gpus(table, node, req)
            table.allocate(node, req, slots)
            ev = [(e.job_id, e.action, e.lost_gpu_h, e.grace_s) for e in plan.evictions]
            return (
                PreemptDecision(pod.key, (pod.key,), (table.names[node],), _victims(ev, by_uid, table.names),
                                plan.lost_gpu_h, pod.priority, plan.reason),
                {pod.uid: TableHold(node, req, slots)},
            )  # fmt: skip
        for e in plan.evictions:
            h = by_uid[e.job_id][1]
            table.allocate(h.node, h.request, h.slots)
        nodes.pop(node)
        why = "victims_insufficient"
    return NoPreempt(pod.key, why)


def plan_gang(
    table: NodeTable,
    key: str,
    members: Sequence[ObservedPod],
    reqs: Sequence[PodRequest],
    cands: Candidates,
    now_s: int,
    wait_s: int,
    grace_s: int,
    cache: dict[str, RunningJob] | None = None,
    scan_nodes: int = 64,
) -> tuple[PreemptDecision, dict[str, TableHold]] | NoPreempt:
    """Empty whole nodes for a gang (module docstring): ``cands`` are busy nodes whose *every* holding is an
    offerable pod. The fewest nodes whose emptying lets :func:`place_gang` place every member; victims only on the
    nodes the placement uses. On a decision the table holds the members; else it is unchanged."""
    if any(r.num_gpu <= 0 or r.gpu_milli != MILLI for r in reqs):
        return NoPreempt(key, "not_whole_gpus")
    prio = min(m.priority for m in members)  # each member takes a node its victims leave: it must outrank them
    kind = WorkloadKind.SERVING if any(kind_of(m) is WorkloadKind.SERVING for m in members) else WorkloadKind.TRAINING
    gpus = sum(r.num_gpu for r in reqs)
    fit = np.zeros(table.n_nodes, dtype=bool)
    for r in reqs:
        fit |= could_fit(table, r)
    jobs = {} if cache is None else cache
    busy = sorted((n for n, c in cands.items() if fit[n] and c), key=lambda n: (-int(table.free_gpus[n]), n))
    offered = {n: [cached_job(jobs, p, n, now_s) for p, _ in cands[n]] for n in busy[:scan_nodes]}
    by_uid = {p.uid: (p, h) for n, c in cands.items() if n in offered for p, h in c}
    request = GangRequest(key, tuple(reqs))
    why = "no_eligible_victims"
    for short in range(1, min(len(offered), len(reqs)) + 1):
        plan = plan_gang_preemption(PreemptRequest(key, kind, prio, gpus), short, offered, now_s, grace_s)
        if isinstance(plan, NoPreemption):
            return NoPreempt(key, plan.reason)
        for e in plan.evictions:
            h = by_uid[e.job_id][1]
            table.release(h.node, h.request, h.slots)
        got = place_gang(table, request)  # allocates the members when it places them
        if isinstance(got, GangPlacement):
            used = set(got.nodes)
            keep = [e for e in plan.evictions if by_uid[e.job_id][1].node in used]
            for e in plan.evictions:  # emptied nodes the placement does not use keep their pods
                if e not in keep:
                    h = by_uid[e.job_id][1]
                    table.allocate(h.node, h.request, h.slots)
            lost = sum(e.lost_gpu_h for e in keep)
            if lost <= gpus * wait_s / 3600:  # FleetScheduler.preempt_gang's gate
                ev = [(e.job_id, e.action, e.lost_gpu_h, e.grace_s) for e in keep]
                holds = {
                    m.uid: TableHold(n, r, s)
                    for m, r, n, s in zip(members, reqs, got.nodes, got.gpu_slots, strict=True)
                }
                return (
                    PreemptDecision(key, tuple(m.key for m in members), tuple(table.names[n] for n in got.nodes),
                                    _victims(ev, by_uid, table.names), lost, prio, plan.reason, members[0].gang),
                    holds,
                )  # fmt: skip
            for r, n, s in zip(reqs, got.nodes, got.gpu_slots, strict=True):
                table.release(n, r, s)
            for e in keep:
                h = by_uid[e.job_id][1]
                table.allocate(h.node, h.request, h.slots)
            return NoPreempt(key, "waiting_is_cheaper")
        for e in plan.evictions:
            h = by_uid[e.job_id][1]
            table.allocate(h.node, h.request, h.slots)
        why = "victims_insufficient"
    return NoPreempt(key, why)
