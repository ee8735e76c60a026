"""Cluster bin-packing report over stored nodes: fragmentation, and the moves that free whole nodes.

A baseline until the scheduler's consolidation planner can be wired in (``schedule.consolidation.
plan_consolidation`` can report a node as freed that received pods earlier in the same plan; reported to its
owner). Rules: drain the least used nodes first, each allocation onto the fullest other node that fits it
(best fit); a node is drained only if ALL its allocations can move (a half-drained node frees nothing); nodes
that received work may themselves be drained later only with everything they hold. Only checkpointable
training moves; nodes holding serving (``latency_sensitive``), training without checkpoints
(``not_checkpointable``) or workloads the registry does not know (``unknown_workload``) are skipped. A move
costs the restart of its GPUs (``RESTART_S``); no work is lost after a checkpoint-on-drain.

``fragmentation`` = free GPUs stranded on partially used nodes / all free GPUs (0 = every free GPU is on an
empty node, 1 = no node is empty).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from gpufleet.adapters.sql.models import ClusterRow, NodeRow, WorkloadRow
from gpufleet.domain.errors import NotFoundError, PermissionDenied
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

RESTART_S = 300  # time a moved checkpointable pod spends restarting (the scheduler's default)


@dataclass(slots=True)
class NodeLoad:
    node_id: str
    gpus_total: int
    allocations: list[tuple[str, int]]

    @property
    def used(self) -> int:
        return sum(g for _, g in self.allocations)

    @property
    def free(self) -> int:
        return self.gpus_total - self.used


@dataclass(frozen=True, slots=True)
class WorkloadTraits:
    latency_sensitive: bool
    checkpointable: bool


def fragmentation(nodes: list[NodeLoad]) -> float:
    free = sum(max(0, n.free) for n in nodes)
    if free == 0:
        return 0.0
    stranded = sum(n.free for n in nodes if n.used > 0 and n.free > 0)
    return round(stranded / free, 4)


def _unmovable(node: NodeLoad, traits: dict[str, WorkloadTraits]) -> str | None:
    for wid, _ in node.allocations:
        t = traits.get(wid)
        if t is None:
            return "unknown_workload"
        if t.latency_sensitive:
            return "latency_sensitive"
        if not t.checkpointable:
            return "not_checkpointable"
    return None


def suggest_moves(
    nodes: list[NodeLoad], traits: dict[str, WorkloadTraits], now_s: int
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, str]]]:
    """(moves, nodes freed, nodes skipped with a reason). Pure; ``now_s`` is kept for cost models that need it."""
    work = [NodeLoad(n.node_id, n.gpus_total, list(n.allocations)) for n in nodes]
    moves: list[dict[str, Any]] = []
    freed: list[str] = []
    skipped: list[dict[str, str]] = []
    for src in sorted(work, key=lambda n: (n.used, n.node_id)):
        if src.used == 0:
            continue
        why = _unmovable(src, traits)
        if why is not None:
            skipped.append({"node": src.node_id, "reason": why})
            continue
        targets = [t for t in work if t is not src and t.used > 0 and t.node_id not in freed]
        spare = {t.node_id: t.free for t in targets}
        plan: list[tuple[str, int, NodeLoad]] = []
        for wid, g in sorted(src.allocations, key=lambda a: -a[1]):
            fits = [t for t in targets if spare[t.node_id] >= g]
            if not fits:
                break
            best = min(fits, key=lambda t: (spare[t.node_id], t.node_id))
            spare[best.node_id] -= g
            plan.append((wid, g, best))
        if len(plan) < len(src.allocations):
            skipped.append({"node": src.node_id, "reason": "no_room_elsewhere"})
            continue
        for wid, g, dst in plan:
            dst.allocations.append((wid, g))
            moves.append(
                {
                    "workload_id": wid,
                    "gpus": g,
                    "from_node": src.node_id,
                    "to_node": dst.node_id,
                    "cost_gpu_h": round(g * RESTART_S / 3600, 4),
                }
            )
        src.allocations = []
        freed.append(src.node_id)
    return moves, freed, skipped


class BinpackService:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def report(self, actor: Actor, cluster_id: str) -> dict[str, Any]:
        if actor.role is Role.APP_TEAM:
            raise PermissionDenied("app_team tokens do not read cluster packing")
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(ClusterRow, cluster_id) is None:
                raise NotFoundError("cluster", cluster_id)
            rows = uow.session.scalars(
                select(NodeRow).where(NodeRow.cluster_id == cluster_id).order_by(NodeRow.id)
            ).all()
            nodes = [
                NodeLoad(
                    r.id, r.gpus_total, [(a["workload_id"], int(a["gpus"])) for a in json.loads(r.allocations_json)]
                )
                for r in rows
            ]
            wids = sorted({w for n in nodes for w, _ in n.allocations})
            traits = {
                w.id: WorkloadTraits(
                    latency_sensitive=w.kind == WorkloadKind.SERVING.value,
                    checkpointable=w.kind == WorkloadKind.TRAINING.value and w.checkpoint_interval_s is not None,
                )
                for w in uow.session.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(wids))).all()
            }
        moves, freed, skipped = suggest_moves(nodes, traits, self._clock.now_s())
        after = {n.node_id: NodeLoad(n.node_id, n.gpus_total, list(n.allocations)) for n in nodes}
        for m in moves:
            src = after[m["from_node"]].allocations
            src.remove(next(a for a in src if a == (m["workload_id"], m["gpus"])))
            after[m["to_node"]].allocations.append((m["workload_id"], m["gpus"]))
        return {
            "cluster": cluster_id,
            "nodes": len(nodes),
            "gpus_total": sum(n.gpus_total for n in nodes),
            "gpus_used": sum(n.used for n in nodes),
            "fragmentation": fragmentation(nodes),
            "suggested_moves": moves,
            "nodes_freed": freed,
            "skipped_nodes": skipped,
            "fragmentation_after": fragmentation(list(after.values())),
        }
