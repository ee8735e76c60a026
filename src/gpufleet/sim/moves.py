"""Consolidation: running training moved from launched nodes onto free reserved nodes, as the node scaler decides.

A mixin of :class:`~gpufleet.sim.world.World`. Once per control period and SKU, if whole reserved nodes are free,
the world offers the node scaler (``loop.node_scaler.moves``) the running checkpointed training that holds whole
launched nodes (on-demand, spot, secondary), with the end each run reports (sim/freeing.py) and the work it would
redo. A run the scaler picks restarts at once from its last checkpoint: its launched nodes are released (they go
idle and face scale-down like any other), its reserved nodes are kept, and the missing ones are taken from the
free reserved nodes idle longest. The redone work counts as lost work, like an interruption's; a move is not an
interruption (no requeue, no launch) and is counted under the placement reason ``move_<reason>``.
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
    from gpufleet.sim.metrics import Metrics


class MoveMixin:
    """Mixin: moving running training onto free reserved nodes. Declares the parts of the world it uses."""

    if TYPE_CHECKING:
        loop: ControlLoop
        q: EventQueue
        fleet: Fleet
        metrics: Metrics
        decisions: DecisionLog
        sku_ids: list[str]
        per_node: list[int]
        lost_gpu_s: int
        moved_redo_gpu_s: int
        moves: int
        p_ckpt: list[int]
        p_epoch: list[int]
        p_gpus: list[int]
        p_nodes: list[tuple[int, ...]]
        p_remaining: list[int]
        p_serving: list[int]
        p_start: list[int]
        p_state: list[int]
        _eta_memo: dict[int, tuple[int, float]]

        horizon_s: int
        drains: int
        drain_moves: int
        p_sku: list[int]

        def _eta_s(self, pod: int, now: int) -> int | None: ...
        def _charge(self, pod: int, now: int) -> None: ...
        def _drain_queue(self, s: int, now: int) -> None: ...

    def _consolidate(self, s: int, now: int) -> None:
        """Offer the node scaler SKU ``s``'s runs on launched nodes while whole reserved nodes are free."""
        f = self.fleet
        per = self.per_node[s]
        if f.index.free_nodes(s, RESERVED_RANK, per) == 0:
            return
        running: list[RunningOnLaunched] = []
        seen: set[int] = set()
        for t in LAUNCHED_RANKS:
            for node in f.index.nodes_with_free(s, t, 0):
                for pod in f.n_pods[node]:
                    if pod in seen:
                        continue
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
            launched = [n for n in self.p_nodes[pod] if f.pools[f.n_pool[n]].tier_rank != RESERVED_RANK]
            target = [n for n in free if f.n_free[n] == per][: len(launched)]
            if self.p_state[pod] != RUNNING or not launched or len(target) < len(launched):
                continue  # the scaler planned more than is free: the world does not overbook
            self._move(pod, launched, target, now)
            self.metrics.placement(f"move_{reason}")
            self.decisions.add(
                now, "node_scaler", "move", reason, None, self.p_gpus[pod], unit="runs", sku=self.sku_ids[s]
            )
        self._drain_queue(s, now)

    def _move_candidate(self, pod: int, per: int, now: int) -> RunningOnLaunched | None:
        """``pod`` as the node scaler sees it, if it is running checkpointed training holding whole nodes."""
        if self.p_serving[pod] >= 0 or self.p_state[pod] != RUNNING or self.p_ckpt[pod] <= 0:
            return None
        g = self.p_gpus[pod]
        if g < per:
            return None
        eta = self._eta_s(pod, now)
        if eta is None:
            return None
        f = self.fleet
        launched = sum(1 for n in self.p_nodes[pod] if f.pools[f.n_pool[n]].tier_rank != RESERVED_RANK)
        redo = (now - self.p_start[pod]) % self.p_ckpt[pod]
        return RunningOnLaunched(pod, g > per, launched, eta - now, redo)

    def _move(self, pod: int, launched: list[int], target: list[int], now: int) -> None:
        """Restart ``pod`` from its last checkpoint with its ``launched`` nodes swapped for ``target`` ones."""
        f = self.fleet
        per = self.per_node[self.fleet.n_sku[launched[0]]]
        run_s = now - self.p_start[pod]
        redo = run_s % self.p_ckpt[pod]
        self._charge(pod, now)
        for n in launched:
            f.release(n, pod, per, now)
        for n in target:
            f.allocate(n, pod, per, now)
        gone = set(launched)
        self.p_nodes[pod] = (*(n for n in self.p_nodes[pod] if n not in gone), *target)
        self.lost_gpu_s += redo * self.p_gpus[pod]
        self.moved_redo_gpu_s += redo * self.p_gpus[pod]
        self.p_remaining[pod] -= run_s - redo
        self.p_start[pod] = now
        self.p_epoch[pod] += 1
        self._eta_memo.pop(pod, None)  # a new run draws its own ETA factor
        self.q.schedule(now + self.p_remaining[pod], JOB_END, pod, self.p_epoch[pod])
        self.moves += 1

    def _drain_part_used(self, s: int, now: int) -> None:
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
                        serving = self.p_serving[p] >= 0
                        eta = self._eta_s(p, now)
                        movable = not serving and self.p_ckpt[p] > 0 and self.p_gpus[p] <= per
                        ends = self.horizon_s if eta is None else eta
                        pods.append(PodView(p, node, min(self.p_gpus[p], per), movable, serving, self.p_start[p], ends))
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
                self._relocate(pod, d.node, dest, now)
            self.drains += 1
            self.metrics.placement(f"consolidate_{d.reason}")
            self.decisions.add(now, "schedule", "drain", d.reason, None, per, sku=self.sku_ids[s])

    def _relocate(self, pod: int, src: int, dest: int, now: int) -> None:
        """Move a checkpointable single-node pod: it checkpoints, restarts on ``dest`` and loses the restart."""
        f = self.fleet
        g = self.p_gpus[pod]
        self._charge(pod, now)
        f.release(src, pod, g, now)
        f.allocate(dest, pod, g, now)
        self.p_nodes[pod] = (dest,)
        self.p_remaining[pod] -= now - self.p_start[pod]  # saved by the checkpoint written on the way
        self.p_remaining[pod] += RESTART_S
        self.lost_gpu_s += RESTART_S * g
        self.moved_redo_gpu_s += RESTART_S * g
        self.p_start[pod] = now
        self.p_epoch[pod] += 1
        self._eta_memo.pop(pod, None)
        self.q.schedule(now + self.p_remaining[pod], JOB_END, pod, self.p_epoch[pod])
        self.drain_moves += 1
