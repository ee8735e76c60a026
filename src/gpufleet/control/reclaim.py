"""Consolidation decisions on an observed cluster: which nodes to drain, which pods to evict, and why.

Built on :func:`gpufleet.schedule.plan_consolidation` over a node table of the schedulable nodes with every
active bound pod allocated. A node is drained only if every pod on it fits elsewhere; serving pods
(``kind=serving``) are latency-sensitive and never moved, so their nodes are skipped
(``latency_sensitive``); a gang member is not moved alone (a gang runs whole or not at all), so its node is skipped
(``not_movable``). Room elsewhere counts only on nodes whose taints the pod tolerates and whose labels its node
selector asks for (a pod that may not run on spot is never drained towards a spot node). Checkpointable training is
listed in ``checkpoint_first``: the world must finish the checkpoint handshake before evicting it. Returns data;
nothing is evicted here.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.control.observation import Observation, ObservedPod
from gpufleet.schedule.consolidation import RunningPod, plan_consolidation
from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest


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


def _node_bound(p: ObservedPod) -> bool:
    """A DaemonSet or static pod: it runs where it is, drain or not."""
    return p.owner_kind in ("DaemonSet", "Node")


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
    words = {w for p in obs.pods for w in p.request.node_selector}  # only labels a pod selects on
    # node-bound pods (daemons, static pods) stay with their node, as kubectl drain leaves them, but the CPU and
    # memory they request is no room for pods drained there: it comes off the node's capacity (never below what the
    # node's other pods request); GPUs one holds are held in the table below (such a node is not drained)
    pinned: dict[str, tuple[int, int]] = {}
    others: dict[str, tuple[int, int]] = {}
    for p in obs.pods:
        if p.active and p.node:
            into = pinned if _node_bound(p) else others
            cpu, mem = into.get(p.node, (0, 0))
            into[p.node] = (cpu + p.request.cpu_milli, mem + p.request.memory_mib)
    specs = []
    for n in nodes:
        (pc, pm), (oc, om) = pinned.get(n.name, (0, 0)), others.get(n.name, (0, 0))
        specs.append(NodeSpec(n.name, max(n.spec.cpu_milli - pc, oc), max(n.spec.memory_mib - pm, om),
                              n.spec.gpu_count, n.spec.gpu_model, labels=tuple(w for w in n.spec.labels if w in words),
                              taints=n.spec.taints))  # fmt: skip
    table = NodeTable.from_specs(specs)
    taints = {w for w in table.bit_of if ":" in w}
    index = {n: i for i, n in enumerate(table.names)}
    running: list[RunningPod] = []
    gated_nodes: set[int] = set()
    pods = {}
    for p in obs.pods:
        if not (p.active and p.node in index):
            continue
        node = index[p.node]
        if _node_bound(p):  # stays with its node; its GPUs are no room for others (its CPU and memory: above)
            gpu = PodRequest(p.request.name, 0, 0, p.request.num_gpu, p.request.gpu_milli)
            slots = best_fit_gpus(table, node, gpu) if gpu.num_gpu else ()
            if gpu.num_gpu and len(slots) == gpu.num_gpu:
                table.allocate(node, gpu, slots)
            continue
        r = p.request
        tol = tuple(sorted(t for t in taints if p.tolerates(t)))
        req = PodRequest(r.name, r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli, r.gpu_models, r.node_selector, tol)
        slots = best_fit_gpus(table, node, req)
        if len(slots) != req.num_gpu:
            continue  # cannot account for it; the planner then sees untracked usage and leaves the node alone
        table.allocate(node, req, slots)
        pods[p.key] = p
        gated = p.priority >= priority_gate
        if gated:
            gated_nodes.add(node)
        stays = gated or bool(p.gang)  # a gang member is not moved alone
        running.append(RunningPod(p.key, req, node, slots, latency_sensitive=p.latency_sensitive,
                                  checkpointable=p.checkpointable and not stays,
                                  restartable=p.kind != "serving" and not stays))  # fmt: skip
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
