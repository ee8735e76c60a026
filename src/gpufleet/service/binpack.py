"""Cluster bin-packing report over stored nodes: fragmentation and moves that would free whole nodes.

Baseline until the scheduling issue's consolidation is wired in; the response shape stays.
``fragmentation`` = free GPUs stranded on partially used nodes / all free GPUs (0 = every free GPU is on an
empty node, 1 = no node is empty). Moves: drain the least used nodes first, placing each allocation on the
fullest other partially used node that still fits it (best fit); a node is only drained if all of its
allocations fit elsewhere, so no move is suggested that does not free a node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from gpufleet.adapters.sql.models import ClusterRow, NodeRow
from gpufleet.domain.errors import NotFoundError, PermissionDenied
from gpufleet.service.auth import Actor, Role
from gpufleet.service.uow import UnitOfWork


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


def fragmentation(nodes: list[NodeLoad]) -> float:
    free = sum(max(0, n.free) for n in nodes)
    if free == 0:
        return 0.0
    stranded = sum(n.free for n in nodes if n.used > 0 and n.free > 0)
    return round(stranded / free, 4)


def suggest_moves(nodes: list[NodeLoad]) -> tuple[list[dict[str, Any]], list[str]]:
    work = [NodeLoad(n.node_id, n.gpus_total, list(n.allocations)) for n in nodes]
    moves: list[dict[str, Any]] = []
    freed: list[str] = []
    for src in sorted(work, key=lambda n: (n.used, n.node_id)):
        if src.used == 0 or src.node_id in freed:
            continue
        targets = [t for t in work if t is not src and t.used > 0 and t.node_id not in freed]
        plan: list[tuple[str, int, NodeLoad]] = []
        spare = {t.node_id: t.free for t in targets}
        ok = True
        for wid, g in sorted(src.allocations, key=lambda a: -a[1]):
            fits = [t for t in targets if spare[t.node_id] >= g]
            if not fits:
                ok = False
                break
            best = min(fits, key=lambda t: (spare[t.node_id], t.node_id))
            spare[best.node_id] -= g
            plan.append((wid, g, best))
        if not ok:
            continue
        for wid, g, dst in plan:
            dst.allocations.append((wid, g))
            moves.append({"workload_id": wid, "gpus": g, "from_node": src.node_id, "to_node": dst.node_id})
        src.allocations = []
        freed.append(src.node_id)
    return moves, freed


class BinpackService:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

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
        moves, freed = suggest_moves(nodes)
        after = {n.node_id: NodeLoad(n.node_id, n.gpus_total, list(n.allocations)) for n in nodes}
        for m in moves:
            after[m["from_node"]].allocations = [
                a for a in after[m["from_node"]].allocations if a[0] != m["workload_id"]
            ]
            after[m["to_node"]].allocations.append((m["workload_id"], m["gpus"]))
        return {
            "cluster": cluster_id,
            "nodes": len(nodes),
            "gpus_total": sum(n.gpus_total for n in nodes),
            "gpus_used": sum(n.used for n in nodes),
            "fragmentation": fragmentation(nodes),
            "suggested_moves": moves,
            "nodes_freed": freed,
            "fragmentation_after": fragmentation(list(after.values())),
        }
