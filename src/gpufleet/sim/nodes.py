"""Node lifecycle of the simulated world: scale-up along the fallback chain, node start, failure, repair, spot
preemption, on-demand stock-outs and scale-down of idle launched nodes.

A mixin of :class:`~gpufleet.sim.world.World`. Every decision comes from a control stage: how many nodes to launch
and which idle nodes to terminate from the node scaler (``loop.node_scaler``), which pool from the placer
(``loop.placer``). Failure and preemption clocks are common random numbers keyed per node (sim/crn.py).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.ports import DemandForecast, IdleNode, PlacementRequest, PoolState, ScaleDownContext, ScaleUpContext
from gpufleet.sim.crn import FAIL, PREEMPT, keyed_exponential
from gpufleet.sim.kinds import (
    DAY_S,
    HOUR_S,
    LAUNCHED_TIERS,
    NODE_FAIL,
    NODE_REPAIR,
    NODE_UP,
    RECHECK,
    SPOT_PREEMPT,
    STOCK,
    TIERS_ALL,
)
from gpufleet.sim.lifecycle import NodeState

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.metrics import Metrics
    from gpufleet.sim.scenario import PoolSpec, Scenario


class NodeLifecycleMixin:
    """Mixin: launching, failing, repairing and terminating nodes. Declares the parts of the world it uses."""

    if TYPE_CHECKING:
        sc: Scenario
        seed: int
        loop: ControlLoop
        q: EventQueue
        fleet: Fleet
        metrics: Metrics
        decisions: DecisionLog
        rng_stock: np.random.Generator
        horizon_s: int
        sku_ids: list[str]
        per_node: list[int]
        pool_specs: dict[int, PoolSpec]
        queue: list[list[deque[int]]]
        pending_gpus: list[int]
        inflight_gpus: list[int]
        freeing_claims: list[dict[int, int]]
        forecasts: dict[int, tuple[int, DemandForecast]]
        node_failures: int
        spot_preemptions: int
        p_gpus: list[int]
        p_ckpt: list[int]
        p_epoch: list[int]
        p_serving: list[int]

        def _tiers(self, pod: int) -> tuple[int, ...]: ...
        def _freeing_times(self, s: int, pod: int, now: int, within_s: int) -> list[int]: ...
        def _drain_queue(self, s: int, now: int) -> None: ...
        def _interrupt(
            self, pod: int, now: int, lost_s: int | None = None, *, requeue: bool = True, drain: bool = True
        ) -> None: ...

    def _pool_states(self, s: int) -> list[PoolState]:
        return [
            PoolState(pr.pool, pr.paid_gpus, pr.capacity_gpus, pr.in_stock)
            for pr in self.fleet.pools
            if pr.sku_idx == s
        ]

    def _provision(self, s: int, now: int, pod: int) -> bool:
        """If queued demand exceeds capacity on its way, launch nodes for ``pod`` along the fallback chain."""
        if self.pending_gpus[s] <= self.inflight_gpus[s]:
            return True
        per = self.per_node[s]
        g = self.p_gpus[pod]
        need = 1 if g <= per else g // per
        lead = self.pool_specs[s].node_start_s
        freeing = self._freeing_times(s, pod, now, lead)
        up = ScaleUpContext(
            now,
            self.sku_ids[s],
            need,
            g > per,
            sum(self.fleet.index.free_nodes(s, t, per) for t in self._tiers(pod)),
            self.inflight_gpus[s] // per,
            len(freeing),
            lead,
        )
        nodes = self.loop.node_scaler.nodes_to_launch(up)
        uncovered = need - (up.free_whole_nodes + up.starting_nodes if up.gang else 0)
        waits = min(len(freeing), uncovered - max(nodes, 0))
        if waits > 0:  # claim the freeing nodes it waits for; look again just after the last should free
            self.freeing_claims[s][pod] = waits
            self.q.schedule(freeing[waits - 1] + 1, RECHECK, pod, self.p_epoch[pod])
        if nodes <= 0:
            return True  # free, starting or freeing nodes will hold it
        req = PlacementRequest(
            workload_id=str(pod),
            sku_id=self.sku_ids[s],
            gpus=nodes * per,
            serving=self.p_serving[pod] >= 0,
            checkpointable=self.p_ckpt[pod] > 0,
        )
        alloc = self.loop.placer.choose(req, self._pool_states(s))
        self.metrics.placement(alloc.reason)
        if alloc.pool_id is None:
            return False
        pidx = next(i for i, pr in enumerate(self.fleet.pools) if pr.pool.id == alloc.pool_id)
        self._launch(pidx, nodes, now)
        self.decisions.launched(now, self.fleet.pools[pidx].pool, nodes, nodes * per, alloc)
        return True

    def _launch(self, pidx: int, nodes: int, now: int) -> None:
        f = self.fleet
        pr = f.pools[pidx]
        for _ in range(nodes):
            node = f.launch(pidx, now, up=False)
            self.inflight_gpus[pr.sku_idx] += f.n_total[node]
            self.q.schedule(now + pr.pool.node_start_s, NODE_UP, node, f.n_epoch[node])

    def _node_alive(self, node: int, now: int) -> None:
        """A node became schedulable: arm its failure (and spot preemption) clocks."""
        f = self.fleet
        pidx = f.n_pool[node]
        pr = f.pools[pidx]
        key = (pidx, f.n_ordinal[node], f.n_lives[node])  # common random numbers: see sim/crn.py
        f.n_lives[node] += 1
        mtbf_s = self.sc.failures.node_mtbf_days * DAY_S
        t_fail = now + int(keyed_exponential(mtbf_s, self.seed, FAIL, *key)) + 1
        if t_fail <= self.horizon_s:
            self.q.schedule(t_fail, NODE_FAIL, node, f.n_epoch[node])
        rate = pr.pool.preemption_rate_per_h
        if rate > 0:
            t_pre = now + int(keyed_exponential(HOUR_S / rate, self.seed, PREEMPT, *key)) + 1
            if t_pre <= self.horizon_s:
                self.q.schedule(t_pre, SPOT_PREEMPT, node, f.n_epoch[node])

    def _on_node_up(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.PROVISIONING:
            return
        s = f.n_sku[node]
        self.inflight_gpus[s] -= f.n_total[node]
        f.node_up(node, now)
        self._node_alive(node, now)
        self._drain_queue(s, now)

    def _evict_all(self, node: int, now: int) -> None:
        for pod in list(self.fleet.n_pods[node]):
            self._interrupt(pod, now)

    def _on_node_fail(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.UP:
            return
        self.node_failures += 1
        f.node_down(node)  # out of the index first so evicted pods do not land back on it
        self._evict_all(node, now)
        self.q.schedule(now + int(self.sc.failures.repair_h * HOUR_S), NODE_REPAIR, node, f.n_epoch[node])

    def _on_node_repair(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.DOWN:
            return
        f.node_up(node, now)
        self._node_alive(node, now)
        self._drain_queue(f.n_sku[node], now)

    def _on_spot_preempt(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.UP:
            return
        self.spot_preemptions += 1
        f.node_down(node)
        self._evict_all(node, now)
        f.terminate(node, now)

    def _on_stock(self, now: int, pidx: int, _b: int) -> None:
        pr = self.fleet.pools[pidx]
        pr.in_stock = not pr.in_stock
        self.metrics.stockout(pr.in_stock)
        self._schedule_stock_toggle(pidx, now)

    def _schedule_stock_toggle(self, pidx: int, now: int) -> None:
        pr = self.fleet.pools[pidx]
        spec = self.pool_specs[pr.sku_idx]
        mean_h = spec.on_demand_mean_in_stock_h if pr.in_stock else spec.on_demand_mean_stockout_h
        if mean_h <= 0:
            return
        t = now + int(self.rng_stock.exponential(mean_h * HOUR_S)) + 1
        if t <= self.horizon_s:
            self.q.schedule(t, STOCK, pidx)

    def _scale_down_idle(self, s: int, now: int) -> None:
        """Ask the node scaler which idle launched (non-reserved) nodes to terminate, and terminate them."""
        f = self.fleet
        per = self.per_node[s]
        idle: list[IdleNode] = []
        min_idle = self.loop.node_scaler.min_idle_s
        for tier in LAUNCHED_TIERS:
            rank = TIER_RANK[tier]
            for n in f.index.nodes_with_free(s, rank, per):
                if now - f.n_idle_since[n] < min_idle:
                    continue
                pr = f.pools[f.n_pool[n]]
                idle.append(
                    IdleNode(
                        n,
                        pr.pool.id,
                        self.sku_ids[s],
                        pr.tier_name,
                        per,
                        now - f.n_idle_since[n],
                        now - f.n_up_since[n],
                        pr.pool.node_start_s,
                        float(pr.pool.price_usd_per_gpu_h),
                    )
                )
        if not idle:
            return
        ctx = ScaleDownContext(
            now,
            self.sku_ids[s],
            idle,
            self.pending_gpus[s],
            self._free_gpus(s),
            self._capacity_gpus(s),
            self._upcoming_demand(s, now),
            self._demand_now(s),
            self._on_demand_price(s),
        )
        for node, reason in self.loop.node_scaler.scale_down(ctx):
            pool = f.pools[f.n_pool[node]].pool
            f.terminate(node, now)
            self.metrics.placement(f"terminate_{reason}")
            self.decisions.add(now, "node_scaler", "scale_down", reason, pool, per)

    def _on_demand_price(self, s: int) -> float:
        """The SKU's on-demand price per GPU-hour (0 if it has no on-demand pool)."""
        for pr in self.fleet.pools:
            if pr.sku_idx == s and pr.pool.tier is Tier.ON_DEMAND:
                return float(pr.pool.price_usd_per_gpu_h)
        return 0.0

    def _upcoming_demand(self, s: int, now: int) -> np.ndarray | None:
        """The median of the current forecast from this hour on (None before the first forecast)."""
        fc = self.forecasts.get(s)
        if fc is None:
            return None
        issued, f = fc
        q = 0.5
        return f.quantiles[q][max(0, now // HOUR_S - issued) :]

    def _capacity_gpus(self, s: int) -> int:
        f = self.fleet
        per = self.per_node[s]
        return per * sum(f.index.free_nodes(s, t, free) for t in TIERS_ALL for free in range(per + 1))

    def _free_gpus(self, s: int) -> int:
        f = self.fleet
        return sum(free * f.index.free_nodes(s, t, free) for t in TIERS_ALL for free in range(1, self.per_node[s] + 1))

    def _demand_now(self, s: int) -> float:
        return float(sum(pr.alloc_gpus for pr in self.fleet.pools if pr.sku_idx == s) + self.pending_gpus[s])
