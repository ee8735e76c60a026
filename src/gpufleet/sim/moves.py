"""Consolidation: running training moved from launched nodes onto free reserved nodes, as the node scaler decides.

A part of :class:`~gpufleet.sim.world.World` (:class:`Consolidation`). Once per control period and SKU, if whole
reserved nodes are free, the world offers the node scaler (``loop.node_scaler.moves``) the running checkpointed
training that holds whole launched nodes (on-demand, spot, secondary), with the end each run reports
(sim/freeing.py) and the work it would redo. A run the scaler picks restarts at once from its last checkpoint: its
launched nodes are released (they go idle and face scale-down like any other), its reserved nodes are kept, and the
missing ones are taken from the free reserved nodes idle longest. The redone work counts as lost work, like an
interruption's; a move is not an interruption (no requeue, no launch) and is counted under the placement reason
``move_<reason>``. Every 4 hours (with the loop's consolidation on), ``control/scheduling.plan_drains`` may empty
part-used launched nodes by moving checkpointable single-node pods onto fuller nodes (each pays ``RESTART_S``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.control.scheduling import NodeView, PodView, plan_drains
from gpufleet.ports import MoveContext, RunningOnLaunched
from gpufleet.sim.kinds import JOB_END, LAUNCHED_RANKS, RESERVED_RANK, RUNNING, TIERS_ALL

DRAIN_PERIOD_S = 4 * 3600  # consolidation cadence (each call builds a small node table: not every tick)
DRAIN_SOURCES = 16  # launched part-used nodes offered to consolidation per SKU and period (least used first)
DRAIN_DESTINATIONS = 64  # part-used nodes offered as destinations (fullest first)
DRAIN_MOVES = 16  # the disruption budget per SKU and period
RESTART_S = 300  # what a moved pod loses restarting from the checkpoint it writes on the way

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.freeing import FreeingEstimates
    from gpufleet.sim.metrics import Metrics
    from gpufleet.sim.pods import Billing, PodTable
    from gpufleet.sim.scheduling import Scheduling


class Consolidation:
    """Moves running training as the node scaler and the consolidation planner decide, and counts what the moves
    cost (the redone work is lost work too: the summary adds it to the interruptions' loss)."""

    def __init__(
        self,
        *,
        pods: PodTable,
        fleet: Fleet,
        q: EventQueue,
        loop: ControlLoop,
        freeing: FreeingEstimates,
        billing: Billing,
        scheduling: Scheduling,
        metrics: Metrics,
        decisions: DecisionLog,
        sku_ids: list[str],
        per_node: list[int],
        horizon_s: int,
    ) -> None:
        self.pods = pods
        self.fleet = fleet
        self.q = q
        self.loop = loop
        self.freeing = freeing
        self.billing = billing
        self.scheduling = scheduling
        self.metrics = metrics
        self.decisions = decisions
        self.sku_ids = sku_ids
        self.per_node = per_node
        self.horizon_s = horizon_s
        self.moves = 0  # runs moved onto free reserved nodes
        self.moved_redo_gpu_s = 0  # the work those moves and the drains' restarts redid
        self.drains = 0  # part-used launched nodes emptied by consolidation
        self.drain_moves = 0

    def consolidate(self, s: int, now: int) -> None:
        """Offer the node scaler SKU ``s``'s runs on launched nodes while whole reserved nodes are free."""
        f = self.fleet
        per = self.per_node[s]
        if f.index.free_nodes(s, RESERVED_RANK, per) == 0:
            return
        running: list[RunningOnLaunched] = []
        seen: set[int] = set()
        gpus = self.pods.gpus
        for t in LAUNCHED_RANKS:
            for node in f.index.iter_with_free(s, t, 0):  # nothing changes the index in this loop
                for pod in f.n_pods[node]:
                    if gpus[pod] < per or pod in seen:
                        continue  # a pod smaller than a node is never a candidate (_move_candidate)
                    seen.add(pod)
                    c = self._move_candidate(pod, per, now)
                    if c is not None:
                        running.append(c)
        if not running:
            return
        free = f.index.nodes_with_free(s, RESERVED_RANK, per)
        ctx = MoveContext(now, self.sku_ids[s], running, [now - f.n_idle_since[n] for n in free])
        decisions = self.loop.node_scaler.moves(ctx)
        if not decisions:
            return
        free.sort(key=lambda n: (f.n_idle_since[n], n))  # longest idle first
        for pod, reason in decisions:
            launched = [n for n in self.pods.nodes[pod] if f.pools[f.n_pool[n]].tier_rank != RESERVED_RANK]
            target = [n for n in free if f.n_free[n] == per][: len(launched)]
            if self.pods.state[pod] != RUNNING or not launched or len(target) < len(launched):
                continue  # the scaler planned more than is free: the world does not overbook
            self.move(pod, launched, target, now)
            self.metrics.placement(f"move_{reason}")
            self.decisions.add(
                now, "node_scaler", "move", reason, None, self.pods.gpus[pod], unit="runs", sku=self.sku_ids[s]
            )
        self.scheduling.drain_queue(s, now)

    def _move_candidate(self, pod: int, per: int, now: int) -> RunningOnLaunched | None:
        """``pod`` as the node scaler sees it, if it is running checkpointed training holding whole nodes."""
        if self.pods.serving[pod] >= 0 or self.pods.state[pod] != RUNNING or self.pods.ckpt[pod] <= 0:
            return None
        g = self.pods.gpus[pod]
        if g < per:
            return None
        eta = self.freeing.eta_s(pod, now)
        if eta is None:
            return None
        f = self.fleet
        launched = sum(1 for n in self.pods.nodes[pod] if f.pools[f.n_pool[n]].tier_rank != RESERVED_RANK)
        redo = (now - self.pods.start[pod]) % self.pods.ckpt[pod]
        # the named tuple, built without its Python-level __new__ frame
        return tuple.__new__(RunningOnLaunched, (pod, g > per, launched, eta - now, redo))

    def move(self, pod: int, launched: list[int], target: list[int], now: int) -> None:
        """Restart ``pod`` from its last checkpoint with its ``launched`` nodes swapped for ``target`` ones."""
        f = self.fleet
        per = self.per_node[self.fleet.n_sku[launched[0]]]
        run_s = now - self.pods.start[pod]
        redo = run_s % self.pods.ckpt[pod]
        self.billing.charge(pod, now)
        for n in launched:
            f.release(n, pod, per, now)
        for n in target:
            f.allocate(n, pod, per, now)
        gone = set(launched)
        self.pods.nodes[pod] = (*(n for n in self.pods.nodes[pod] if n not in gone), *target)
        self.moved_redo_gpu_s += redo * self.pods.gpus[pod]
        self.pods.remaining[pod] -= run_s - redo
        self.pods.start[pod] = now
        self.pods.epoch[pod] += 1
        self.freeing.run_ended(pod)  # a new run draws its own ETA factor
        self.q.schedule(now + self.pods.remaining[pod], JOB_END, pod, self.pods.epoch[pod])
        self.moves += 1

    def drain_part_used(self, s: int, now: int) -> None:
        """Offer consolidation (control/scheduling.plan_drains) the SKU's part-used launched nodes; apply the
        drains it keeps: each moved pod checkpoints, restarts on its destination and pays ``RESTART_S``."""
        f = self.fleet
        per = self.per_node[s]
        views: list[NodeView] = []
        pods: list[PodView] = []
        seen: set[int] = set()
        for free in range(per - 1, 0, -1):  # least used first
            for t in LAUNCHED_RANKS:
                for node in f.index.iter_with_free(s, t, free):
                    if len(views) >= DRAIN_SOURCES:
                        break
                    views.append(NodeView(node, per, per - free, True))
                    seen.add(node)
                    for p in f.n_pods[node]:
                        serving = self.pods.serving[p] >= 0
                        eta = self.freeing.eta_s(p, now)
                        movable = not serving and self.pods.ckpt[p] > 0 and self.pods.gpus[p] <= per
                        ends = self.horizon_s if eta is None else eta
                        pods.append(
                            PodView(p, node, min(self.pods.gpus[p], per), movable, serving, self.pods.start[p], ends)
                        )
        if not pods:
            return
        dests = 0
        for free in range(1, per):  # fullest first
            for t in TIERS_ALL:
                for node in f.index.iter_with_free(s, t, free):
                    if dests >= DRAIN_DESTINATIONS:
                        break
                    if node not in seen:
                        views.append(NodeView(node, per, per - free, False))
                        dests += 1
        drains = plan_drains(views, pods, now, DRAIN_MOVES, self.loop.node_scaler.min_idle_s, RESTART_S)
        for d in drains:
            for pod, dest in d.moves:
                self.relocate(pod, d.node, dest, now)
            self.drains += 1
            self.metrics.placement(f"consolidate_{d.reason}")
            self.decisions.add(now, "schedule", "drain", d.reason, None, per, sku=self.sku_ids[s])

    def relocate(self, pod: int, src: int, dest: int, now: int) -> None:
        """Move a checkpointable single-node pod: it checkpoints, restarts on ``dest`` and loses the restart."""
        f = self.fleet
        g = self.pods.gpus[pod]
        self.billing.charge(pod, now)
        f.release(src, pod, g, now)
        f.allocate(dest, pod, g, now)
        self.pods.nodes[pod] = (dest,)
        self.pods.remaining[pod] -= now - self.pods.start[pod]  # saved by the checkpoint written on the way
        self.pods.remaining[pod] += RESTART_S
        self.moved_redo_gpu_s += RESTART_S * g
        self.pods.start[pod] = now
        self.pods.epoch[pod] += 1
        self.freeing.run_ended(pod)
        self.q.schedule(now + self.pods.remaining[pod], JOB_END, pod, self.pods.epoch[pod])
        self.drain_moves += 1
