"""Re-packing decisions over observed nodes: how fragmented the fleet is, and the moves that free whole nodes.

Moves come from the scheduler's planner (``schedule.consolidation.plan_consolidation``): drain the least used
nodes first, each allocation onto the fullest other node that fits it (best fit); a node is drained only if
ALL its allocations can move (a half-drained node frees nothing); a node that received work in the plan is
never drained later in it (``received_pods``). Only checkpointable training moves; nodes holding serving
(``latency_sensitive``), training without checkpoints (``not_checkpointable``) or workloads the world does not
know (``unknown_workload``) are skipped. A move costs the restart of its GPUs (``RESTART_S``); no work is lost
after a checkpoint-on-drain. Nodes whose allocations exceed their GPUs are left alone (``over_capacity``).

``fragmentation`` = free GPUs stranded on partially used nodes / all free GPUs (0 = every free GPU is on an
empty node, 1 = no node is empty). The service's bin-packing report and its reconciler ask this module; the
simulator's consolidation is :func:`gpufleet.control.scheduling.plan_drains` over the same planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.schedule.consolidation import RunningPod, plan_consolidation
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest

RESTART_S = 300  # time a moved checkpointable pod spends restarting (the scheduler's default)


@dataclass(slots=True)
class NodeLoad:
    node_id: str
    gpus_total: int
    allocations: list[tuple[str, int]]
    sku: str = ""  # the node's GPU model: work moves only between nodes of the same one ("" = any)

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
    """(moves, nodes freed, nodes skipped with a reason). Pure: delegates to the scheduler's planner.

    Each allocation becomes a whole-GPU pod on a node table (GPUs and their model only: the store keeps no
    CPU/memory per node), asking for the model of the node it runs on; only checkpointable training is movable,
    there is no disruption budget here.
    """
    if not nodes:
        return [], [], []
    table = NodeTable.from_specs([NodeSpec(n.node_id, 0, 0, n.gpus_total, n.sku) for n in nodes])
    running: list[RunningPod] = []
    wid_of: dict[str, str] = {}
    over: list[int] = []
    for i, n in enumerate(nodes):
        if n.free < 0 or any(g < 0 for _, g in n.allocations):
            over.append(i)  # the store disagrees with itself: leave the node alone
            continue
        t = table.gpu_left_milli[i]
        for j, (wid, g) in enumerate(n.allocations):
            req = PodRequest(wid, 0, 0, g, 1000 if g else 0, (n.sku,) if n.sku else ())
            slots = tuple(int(x) for x in np.flatnonzero(t == 1000)[:g])
            table.allocate(i, req, slots)
            tr = traits.get(wid)
            movable = tr is not None and tr.checkpointable and not tr.latency_sensitive
            pid = f"{i}/{j}"
            wid_of[pid] = wid
            running.append(
                RunningPod(
                    pid,
                    req,
                    i,
                    slots,
                    latency_sensitive=tr is not None and tr.latency_sensitive,
                    checkpointable=movable,
                    restartable=False,
                    restart_s=RESTART_S,
                )
            )
    plan = plan_consolidation(table, running, now_s, max_moves_per_hour=len(running))
    moves = [
        {
            "workload_id": wid_of[m.pod_id],
            "gpus": len(m.gpu_slots),
            "from_node": nodes[m.from_node].node_id,
            "to_node": nodes[m.to_node].node_id,
            "cost_gpu_h": round(m.cost_gpu_h, 4),
        }
        for m in plan.moves
    ]
    skipped = [{"node": nodes[i].node_id, "reason": "over_capacity"} for i in over]
    for i, why in plan.skipped:
        if why in ("latency_sensitive", "not_movable"):
            why = _unmovable(nodes[i], traits) or why
        skipped.append({"node": nodes[i].node_id, "reason": why})
    return moves, [nodes[i].node_id for i in plan.nodes_freed], skipped


@dataclass(frozen=True, slots=True)
class RepackPlan:
    """:func:`plan_repack`'s answer: the moves, the nodes they free, the nodes skipped (with reasons) and the
    fragmentation before and after the moves."""

    moves: list[dict[str, Any]]
    nodes_freed: list[str]
    skipped: list[dict[str, str]]
    fragmentation: float
    fragmentation_after: float


def plan_repack(nodes: list[NodeLoad], traits: dict[str, WorkloadTraits], now_s: int) -> RepackPlan:
    """The moves :func:`suggest_moves` proposes and the fleet's fragmentation before and after them."""
    moves, freed, skipped = suggest_moves(nodes, traits, now_s)
    after = {n.node_id: NodeLoad(n.node_id, n.gpus_total, list(n.allocations), n.sku) for n in nodes}
    for m in moves:
        src = after[m["from_node"]].allocations
        src.remove(next(a for a in src if a == (m["workload_id"], m["gpus"])))
        after[m["to_node"]].allocations.append((m["workload_id"], m["gpus"]))
    return RepackPlan(moves, freed, skipped, fragmentation(nodes), fragmentation(list(after.values())))
