"""Consolidation decisions on an observed cluster: which nodes to drain, which pods to evict, and why.

Built on :func:`gpufleet.schedule.plan_consolidation` over a node table of the schedulable nodes with every
active bound pod allocated. A node is drained only if every pod on it fits elsewhere; serving pods
(``kind=serving``) are latency-sensitive and never moved, so their nodes are skipped
(``latency_sensitive``). Checkpointable training is listed in ``checkpoint_first``: the world must finish the
checkpoint handshake before evicting it. Returns data; nothing is evicted here.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.control.observation import Observation
from gpufleet.schedule.consolidation import RunningPod, plan_consolidation
from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.table import NodeSpec, NodeTable


@dataclass(frozen=True, slots=True)
class NodeDrain:
    node: str
    evict: tuple[str, ...]  # namespace/name
    checkpoint_first: tuple[str, ...]
    gpus_freed: int
    reason: str = "consolidate_underused_node"


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    drains: tuple[NodeDrain, ...]
    skipped: tuple[tuple[str, str], ...]  # (node, reason code)


def plan_reclaim(
    obs: Observation,
    now_s: int,
    max_moves_per_hour: int = 10,
    moves_in_last_hour: int = 0,
    priority_gate: int = 1_000_000,
) -> ReclaimPlan:
    """``priority_gate``: a node holding a pod with priority at or above it is never drained (reason
    ``priority_gate``; the default keeps ``system-*`` priority classes, 2e9, and anything >= 1e6 in place)."""
    nodes = sorted((n for n in obs.nodes if n.schedulable), key=lambda n: n.name)
    if not nodes:
        return ReclaimPlan((), ())
    specs = [NodeSpec(n.name, n.spec.cpu_milli, n.spec.memory_mib, n.spec.gpu_count, n.spec.gpu_model) for n in nodes]
    table = NodeTable.from_specs(specs)
    index = {n: i for i, n in enumerate(table.names)}
    running: list[RunningPod] = []
    gated_nodes: set[int] = set()
    pods = {}
    for p in obs.pods:
        if not (p.active and p.node in index) or p.owner_kind in ("DaemonSet", "Node"):
            continue  # node-bound pods (daemons, static pods) stay with their node, as kubectl drain does
        node = index[p.node]
        slots = best_fit_gpus(table, node, p.request)
        if len(slots) != p.request.num_gpu:
            continue  # cannot account for it; the planner then sees untracked usage and leaves the node alone
        table.allocate(node, p.request, slots)
        pods[p.key] = p
        gated = p.priority >= priority_gate
        if gated:
            gated_nodes.add(node)
        running.append(RunningPod(p.key, p.request, node, slots, latency_sensitive=p.latency_sensitive,
                                  checkpointable=p.checkpointable and not gated,
                                  restartable=p.kind != "serving" and not gated))  # fmt: skip
    plan = plan_consolidation(table, running, now_s, max_moves_per_hour, moves_in_last_hour)
    drains = []
    for node in plan.nodes_freed:
        evict = tuple(sorted(m.pod_id for m in plan.moves if m.from_node == node))
        ckpt = tuple(k for k in evict if pods[k].checkpointable and pods[k].kind == "training")
        drains.append(NodeDrain(table.names[node], evict, ckpt, int(table.gpu_count[node])))
    skipped = tuple(
        (table.names[n], "priority_gate" if n in gated_nodes and r == "not_movable" else r) for n, r in plan.skipped
    )
    return ReclaimPlan(tuple(drains), skipped)
