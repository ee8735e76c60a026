"""Consolidation: propose moves that drain lightly used nodes onto fuller ones, freeing whole nodes.

Only checkpointable or restartable work moves; latency-sensitive serving never moves (reason code
``latency_sensitive``). Each move carries its cost: GPU-hours of work lost (since the last checkpoint,
or nothing beyond the restart if it checkpoints on the way) plus restart time. A node is drained only if
EVERY pod on it can be re-placed elsewhere (a half-drained node frees nothing) and only while the
disruption budget (moves per hour) allows. The plan is computed on a scratch copy of the node table;
applying it is the caller's job. Feeds ``GET /v1/clusters/{cluster}/binpack``.

Plan consistency (guarded by a property test that applies the moves in order): a node that receives a
pod is never drained later in the same plan (reason code ``received_pods``) and a drained node never
receives one, so every move starts from the pod's current node and every node in ``nodes_freed`` is
empty once all moves are applied in order. A node whose table usage is not fully accounted for by
``running`` is never drained (``untracked_usage``): the planner cannot move what it does not know about.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.table import NodeTable, PodRequest


@dataclass(frozen=True, slots=True)
class RunningPod:
    id: str
    request: PodRequest
    node: int
    gpu_slots: tuple[int, ...]
    latency_sensitive: bool = False
    checkpointable: bool = False
    restartable: bool = True
    last_checkpoint_s: int | None = None
    started_s: int = 0
    restart_s: int = 300


@dataclass(frozen=True, slots=True)
class Move:
    pod_id: str
    from_node: int
    to_node: int
    gpu_slots: tuple[int, ...]
    cost_gpu_h: float
    reason: str = "drain_node"


@dataclass(frozen=True, slots=True)
class ConsolidationPlan:
    moves: tuple[Move, ...]
    nodes_freed: tuple[int, ...]
    gpus_freed: int
    cost_gpu_h: float
    skipped: tuple[tuple[int, str], ...]  # (node, reason code)


def move_cost_gpu_h(pod: RunningPod, now_s: int) -> float:
    """GPU-hours a move wastes: restart time, plus work since the last checkpoint if it cannot checkpoint."""
    gpus = pod.request.total_gpu_milli / 1000
    if pod.checkpointable:
        lost_s = 0
    else:
        lost_s = max(0, now_s - (pod.last_checkpoint_s if pod.last_checkpoint_s is not None else pod.started_s))
    return gpus * (lost_s + pod.restart_s) / 3600


def plan_consolidation(
    table: NodeTable,
    running: Sequence[RunningPod],
    now_s: int,
    max_moves_per_hour: int,
    moves_in_last_hour: int = 0,
) -> ConsolidationPlan:
    """Drain the least-used nodes first while the budget lasts; each drained node frees all its GPUs."""
    scratch = copy.deepcopy(table)
    budget = max(0, max_moves_per_hour - moves_in_last_hour)
    by_node: dict[int, list[RunningPod]] = {}
    for p in running:
        by_node.setdefault(p.node, []).append(p)
    used = table.gpu_count.astype(np.int64) * 1000 - table.gpu_left_milli.sum(axis=1)
    untracked = _untracked_usage(table, by_node)
    drained: set[int] = set()
    received: set[int] = set()  # destinations so far: draining one would strand the pods it received
    moves: list[Move] = []
    skipped: list[tuple[int, str]] = []
    for node in sorted(by_node, key=lambda n: (int(used[n]), n)):
        pods = by_node[node]
        if node in received:
            skipped.append((node, "received_pods"))
            continue
        if node in untracked:
            skipped.append((node, "untracked_usage"))
            continue
        if any(p.latency_sensitive for p in pods):
            skipped.append((node, "latency_sensitive"))
            continue
        if any(not (p.checkpointable or p.restartable) for p in pods):
            skipped.append((node, "not_movable"))
            continue
        if len(pods) > budget:
            skipped.append((node, "disruption_budget"))
            continue
        trial: list[Move] = []
        for p in pods:  # take the pod off its node in the scratch table
            scratch.release(p.node, p.request, p.gpu_slots)
        blocked = np.zeros(table.n_nodes, dtype=bool)
        blocked[list(drained | {node})] = True
        ok = True
        for p in sorted(pods, key=lambda p: -p.request.total_gpu_milli):
            cand = np.flatnonzero(scratch.feasible(p.request) & ~blocked & (used > 0))
            if cand.size == 0:
                ok = False
                break
            free = scratch.gpu_left_milli[cand].sum(axis=1)
            dest = int(cand[int(np.argmin(free))])  # fullest node that fits
            gpus = best_fit_gpus(scratch, dest, p.request)
            scratch.allocate(dest, p.request, gpus)
            trial.append(Move(p.id, node, dest, gpus, move_cost_gpu_h(p, now_s)))
        if not ok:
            for m in trial:  # undo the trial and put the pods back
                scratch.release(m.to_node, next(q.request for q in pods if q.id == m.pod_id), m.gpu_slots)
            for p in pods:
                scratch.allocate(p.node, p.request, p.gpu_slots)
            skipped.append((node, "no_room_elsewhere"))
            continue
        moves.extend(trial)
        drained.add(node)
        received.update(m.to_node for m in trial)
        budget -= len(trial)
    return ConsolidationPlan(
        moves=tuple(moves),
        nodes_freed=tuple(sorted(drained)),
        gpus_freed=int(sum(int(table.gpu_count[n]) for n in drained)),
        cost_gpu_h=sum(m.cost_gpu_h for m in moves),
        skipped=tuple(skipped),
    )


def _untracked_usage(table: NodeTable, by_node: dict[int, list[RunningPod]]) -> set[int]:
    """Nodes whose used CPU, memory or GPU in ``table`` differs from the sum of their running pods."""
    out: set[int] = set()
    for node, pods in by_node.items():
        cpu = sum(p.request.cpu_milli for p in pods)
        mem = sum(p.request.memory_mib for p in pods)
        gpu = sum(p.request.total_gpu_milli for p in pods)
        used_cpu = int(table.cpu_cap_milli[node] - table.cpu_left_milli[node])
        used_mem = int(table.mem_cap_mib[node] - table.mem_left_mib[node])
        used_gpu = int(table.gpu_count[node]) * 1000 - int(table.gpu_left_milli[node].sum())
        if (cpu, mem, gpu) != (used_cpu, used_mem, used_gpu):
            out.add(node)
    return out
