"""Node lifecycle of the simulated world: scale-up along the fallback chain, node start, failure, repair, spot
preemption, on-demand stock-outs and scale-down of idle launched nodes.

Two parts of :class:`~gpufleet.sim.world.World`: :class:`Provisioner` (scale-up and scale-down) and
:class:`NodeEvents` (start, failure, repair, preemption, stock-outs). Every decision comes from a control stage: how
many nodes to launch and which idle nodes to terminate from the node scaler (``loop.node_scaler``), which pool from
the placer (``loop.placer``). Failure and preemption clocks are common random numbers keyed per node (sim/crn.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpufleet.control.start_buffer import LateReading, StartBuffer, spot_lane
from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.ports import IdleNode, PlacementRequest, PoolState, ScaleDownContext, ScaleUpContext
from gpufleet.sim.crn import FAIL, PREEMPT, keyed_exponential
from gpufleet.sim.kinds import (
    DAY_S,
    HOUR_S,
    LAUNCHED_TIERS,
    NODE_FAIL,
    NODE_REPAIR,
    NODE_UP,
    QUEUED,
    RECHECK,
    RESERVED_RANK,
    SPOT_PREEMPT,
    SPOT_RANK,
    STOCK,
    TIERS_ALL,
    TIERS_NO_SPOT,
)
from gpufleet.sim.lifecycle import NodeState

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.forecasts import ForecastBook
    from gpufleet.sim.freeing import FreeingEstimates
    from gpufleet.sim.metrics import Metrics
    from gpufleet.sim.pods import PodTable, WorkQueues
    from gpufleet.sim.scenario import FailureSpec, PoolSpec
    from gpufleet.sim.scheduling import Scheduling


class Provisioner:
    """Scale-up for queued pods (how many nodes from the node scaler, which pool from the placer) and scale-down of
    idle launched nodes (which ones from the node scaler). Owns the GPUs on nodes still provisioning."""

    def __init__(
        self,
        *,
        pods: PodTable,
        queues: WorkQueues,
        fleet: Fleet,
        q: EventQueue,
        loop: ControlLoop,
        freeing: FreeingEstimates,
        forecasts: ForecastBook,
        metrics: Metrics,
        decisions: DecisionLog,
        sku_ids: list[str],
        per_node: list[int],
        pool_specs: dict[int, PoolSpec],
        warm_start: bool = False,
    ) -> None:
        self.pods = pods
        self.queues = queues
        self.fleet = fleet
        self.q = q
        self.loop = loop
        self.freeing = freeing
        # day 0's fleet is up (Scenario.warm_start): nodes launched at time 0 are up at time 0
        self.warm_until_s = 0 if warm_start else -1
        self.forecasts = forecasts
        self.metrics = metrics
        self.decisions = decisions
        self.sku_ids = sku_ids
        self.per_node = per_node
        self.pool_specs = pool_specs
        # GPUs on nodes still provisioning for queued work, per SKU and tier rank (capacity on its way for a pod
        # is what starts on the tiers it may use)
        self.inflight_tier_gpus = [[0] * len(TIER_RANK) for _ in sku_ids]
        # the secondary base (ControlLoop.secondary_base): GPUs in use on on-demand + secondary nodes per hour (the
        # last window), and the base's nodes still provisioning (not capacity on its way for queued work)
        self.launched_in_use: list[list[float]] = [[] for _ in sku_ids]
        self.base_starting: set[int] = set()

    def pool_states(self, s: int) -> list[PoolState]:
        return [
            PoolState(pr.pool, pr.paid_gpus, pr.capacity_gpus, pr.in_stock)
            for pr in self.fleet.pools
            if pr.sku_idx == s
        ]

    def gang_reach_nodes(self, s: int, pod: int) -> int:
        """Whole nodes gang ``pod`` could have without running work ending: free on the tiers it may use, starting
        on them (a launch in flight on a tier it may not use, e.g. spot, is not its), and still launchable in those
        tiers' launched pools that are in stock (their quota or provider ceiling less what is paid; an unbounded
        pool: as many as it needs)."""
        per = self.per_node[s]
        tiers = self.pods.tiers(pod)
        f = self.fleet
        starting = self.inflight_tier_gpus[s]
        reach = sum(f.index.free_nodes(s, t, per) for t in tiers) + sum(starting[t] for t in tiers) // per
        for pr in f.pools:
            if pr.sku_idx != s or pr.tier_rank not in tiers or pr.tier_rank == RESERVED_RANK or not pr.in_stock:
                continue
            room = pr.headroom_gpus
            if room is None:
                return self.pods.gpus[pod] // per
            reach += max(0, room) // per
        return reach

    def unreachable_gang_gpus(self, s: int) -> int:
        """``ScaleDownContext.unreachable_gang_gpus``: the GPUs of the queued gangs of SKU ``s`` that cannot
        complete from what is at hand (:meth:`gang_reach_nodes`), when every queued pod is such a gang; else 0."""
        per = self.per_node[s]
        p = self.pods
        out = 0
        seen: set[int] = set()
        for prio in (3, 2, 1, 0):
            for q in self.queues.queue[s][prio]:
                if p.state[q] != QUEUED or q in seen:
                    continue  # removed while queued, or queued again behind an entry not yet dropped
                seen.add(q)
                g = p.gpus[q]
                if g <= per or self.gang_reach_nodes(s, q) >= g // per:
                    return 0  # work an idle node can serve, or a gang that can complete
                out += g
        return out

    def provision(self, s: int, now: int, pod: int) -> bool:
        """If queued demand exceeds capacity on its way, launch nodes for ``pod`` along the fallback chain (the
        capacity on its way for ``pod``: the nodes starting on the tiers it may use)."""
        tiers = self.pods.tiers(pod)
        starting = self.inflight_tier_gpus[s]
        on_its_way = sum(starting[t] for t in tiers)
        if self.queues.pending_gpus[s] <= on_its_way:
            return True
        per = self.per_node[s]
        g = self.pods.gpus[pod]
        need = 1 if g <= per else g // per
        lead = self.start_delay_s(self.pool_specs[s].node_start_s, now)
        freeing = self.freeing.freeing_times(s, pod, now, lead)
        up = ScaleUpContext(
            now,
            self.sku_ids[s],
            need,
            g > per,
            sum(self.fleet.index.free_nodes(s, t, per) for t in tiers),
            on_its_way // per,
            len(freeing),
            lead,
        )
        nodes = self.loop.node_scaler.nodes_to_launch(up)
        uncovered = need - (up.free_whole_nodes + up.starting_nodes if up.gang else 0)
        waits = min(len(freeing), uncovered - max(nodes, 0))
        if waits > 0:  # claim the freeing nodes it waits for; look again just after the last should free
            self.freeing.claims[s][pod] = waits
            self.q.schedule(freeing[waits - 1] + 1, RECHECK, pod, self.pods.epoch[pod])
        if nodes <= 0:
            return True  # free, starting or freeing nodes will hold it
        while nodes > 0:  # a placer may answer with fewer whole nodes (a split launch): ask again for the rest
            req = PlacementRequest(
                workload_id=str(pod),
                sku_id=self.sku_ids[s],
                gpus=nodes * per,
                serving=self.pods.serving[pod] >= 0,
                checkpointable=self.pods.ckpt[pod] > 0,
                gpus_per_node=per,
            )
            alloc = self.loop.placer.choose(req, self.pool_states(s))
            self.metrics.placement(alloc.reason)
            if alloc.pool_id is None:
                return False
            pidx = next(i for i, pr in enumerate(self.fleet.pools) if pr.pool.id == alloc.pool_id)
            k = min(nodes, max(1, alloc.gpus // per))
            self.launch(pidx, k, now)
            self.decisions.launched(now, self.fleet.pools[pidx].pool, k, k * per, alloc)
            nodes -= k
        return True

    def launch(self, pidx: int, nodes: int, now: int, *, for_queue: bool = True) -> None:
        """Launch nodes in a pool; ``for_queue``: they count as capacity on its way for queued work."""
        f = self.fleet
        pr = f.pools[pidx]
        for _ in range(nodes):
            node = f.launch(pidx, now, up=False)
            if for_queue:
                self.inflight_tier_gpus[pr.sku_idx][pr.tier_rank] += f.n_total[node]
            else:
                self.base_starting.add(node)
            self.q.schedule(now + self.start_delay_s(pr.pool.node_start_s, now), NODE_UP, node, f.n_epoch[node])

    def hold_base(self, s: int, now: int) -> None:
        """Hourly, with the loop's secondary base: record the SKU's GPUs in use on on-demand and secondary nodes
        and launch the secondary nodes the base holds that are missing (within the provider's room, in stock). The
        base's nodes are not kept from scale-down: an idle one goes by the node scaler's rent-or-buy hold like any
        other (keeping them measured worse on default, docs/benchmarks/loop.md "Session 19")."""
        rule = self.loop.secondary_base
        if rule is None:
            return
        f = self.fleet
        used = 0
        for pr in f.pools:
            if pr.sku_idx == s and pr.pool.tier in (Tier.ON_DEMAND, Tier.SECONDARY):
                used += pr.alloc_gpus
        hist = self.launched_in_use[s]
        hist.append(float(used))
        if len(hist) > rule.window_h:
            del hist[: len(hist) - rule.window_h]
        sec = f.pool_of(s, Tier.SECONDARY)
        if sec < 0:
            return
        pr = f.pools[sec]
        per = self.per_node[s]
        cap_nodes = (pr.capacity_gpus if pr.capacity_gpus is not None else pr.paid_gpus) // per
        want = rule.decide(
            hist, per, secondary_usd=pr.price_usd, on_demand_usd=self.on_demand_price(s), max_nodes=cap_nodes
        ).nodes
        k = want - pr.paid_gpus // per
        if k > 0 and pr.in_stock:
            self.launch(sec, k, now, for_queue=False)
            self.decisions.add(now, "node_scaler", "scale_up", "secondary_base", pr.pool, k * per, count=k)

    def hold_buffer(self, now: int) -> None:
        """Hourly, with the loop's start buffer: decide the SKUs' buffers from the jobs of the window that started
        late and what a node of each costs on demand (control/start_buffer.py). With the rule's spot lanes, a SKU
        with spot capacity is read as two lanes: its jobs that may not use spot (priced on demand) and its
        checkpointed jobs (priced at spot)."""
        rule = self.loop.start_buffer
        if rule is None:
            return
        readings = {}
        window = rule.window_h * HOUR_S
        for s, sku_id in enumerate(self.sku_ids):
            # a node's on-demand price; a SKU without an on-demand pool at 1 USD per GPU-hour (as node_release's)
            node_usd_h = self.per_node[s] * (self.on_demand_price(s) or 1.0)
            spot = self.spot_lane_pool(s)
            if spot < 0:
                readings[sku_id] = LateReading(*self.pods.late_starts(s, now, window, rule.within_s), node_usd_h)
                continue
            readings[sku_id] = LateReading(*self.pods.late_starts(s, now, window, rule.within_s, False), node_usd_h)
            spot_usd_h = self.per_node[s] * self.fleet.pools[spot].price_usd
            late = self.pods.late_starts(s, now, window, rule.within_s, True)
            readings[spot_lane(sku_id)] = LateReading(*late, spot_usd_h)
        rule.decide(readings)  # kept by the rule: buffer_nodes and the launches read it

    def spot_lane_pool(self, s: int) -> int:
        """The SKU's spot pool when the loop's start buffer holds a spot lane for it (the rule's ``spot`` and a
        spot pool with room to launch into), else -1."""
        rule = self.loop.start_buffer
        if rule is None or not rule.spot:
            return -1
        i = self.fleet.pool_of(s, Tier.SPOT)
        cap = self.fleet.pools[i].capacity_gpus if i >= 0 else 0
        return i if cap is None or cap >= self.per_node[s] else -1

    def spot_buffer_gpus(self, s: int) -> int:
        """GPUs the start buffer's spot lane asks to keep free on the SKU's spot nodes (0 without one)."""
        rule = self.loop.start_buffer
        if rule is None or self.spot_lane_pool(s) < 0:
            return 0
        return rule.nodes(spot_lane(self.sku_ids[s])) * self.per_node[s]

    def buffer_nodes(self, s: int) -> int:
        """Whole nodes of free GPUs the loop's start buffer last asked for SKU ``s`` (0 without one)."""
        rule = self.loop.start_buffer
        return rule.nodes(self.sku_ids[s]) if rule is not None else 0

    def top_up_buffer(self, s: int, now: int) -> None:
        """Launch the whole nodes the SKU's start buffer misses (``StartBuffer.launch_nodes``: free GPUs on tiers
        every job may use, and nodes launched outside the queue still starting, count), along the placer's chain for
        a job that may not use spot, and those of its spot lane on spot; nothing while work of the SKU is queued
        (its launches are the queue's)."""
        rule = self.loop.start_buffer
        if rule is None or self.queues.pending_gpus[s] > 0:
            return
        self._top_up_spot(s, now, rule)
        d = rule.last(self.sku_ids[s])
        if d is None or d.nodes <= 0:
            return
        want = d.nodes
        per = self.per_node[s]
        f = self.fleet
        pools, n_pool = f.pools, f.n_pool  # nodes launched for the spot lane are not this buffer's
        starting = sum(
            1 for n in self.base_starting if pools[n_pool[n]].sku_idx == s and pools[n_pool[n]].tier_rank != SPOT_RANK
        )
        short = rule.launch_nodes(want, per, self.free_gpus(s, TIERS_NO_SPOT), starting)
        while short > 0:
            req = PlacementRequest(workload_id="start_buffer", sku_id=self.sku_ids[s], gpus=short * per,
                                   serving=False, checkpointable=False, gpus_per_node=per)  # fmt: skip
            alloc = self.loop.placer.choose(req, self.pool_states(s))
            if alloc.pool_id is None:
                return
            pidx = next(i for i, pr in enumerate(f.pools) if pr.pool.id == alloc.pool_id)
            k = min(short, max(1, alloc.gpus // per))
            self.launch(pidx, k, now, for_queue=False)
            self.decisions.add(now, "node_scaler", "scale_up", d.reason, f.pools[pidx].pool, k * per, count=k)
            short -= k

    def _top_up_spot(self, s: int, now: int, rule: StartBuffer) -> None:
        """Launch the spot nodes the SKU's spot lane misses (free GPUs on spot nodes and spot nodes launched
        outside the queue still starting count), within the spot pool's room."""
        spot = self.spot_lane_pool(s)
        d = rule.last(spot_lane(self.sku_ids[s])) if spot >= 0 else None
        if d is None or d.nodes <= 0:
            return
        f = self.fleet
        pr = f.pools[spot]
        per = self.per_node[s]
        starting = sum(1 for n in self.base_starting if f.n_pool[n] == spot)
        short = rule.launch_nodes(d.nodes, per, self.free_gpus(s, (SPOT_RANK,)), starting)
        room = short if pr.capacity_gpus is None else (pr.capacity_gpus - pr.paid_gpus) // per
        k = min(short, room)
        if k > 0 and pr.in_stock:
            self.launch(spot, k, now, for_queue=False)
            self.decisions.add(now, "node_scaler", "scale_up", d.reason, pr.pool, k * per, count=k)

    def start_delay_s(self, start_s: int, now: int) -> int:
        """``start_s`` (a node's start or a replica's cold start), or 0 for day 0's fleet: what starts at time 0 in
        a warm start (``Scenario.warm_start``) is up at time 0."""
        return 0 if now <= self.warm_until_s else start_s

    def scale_down_idle(self, s: int, now: int) -> None:
        """Ask the node scaler which idle launched (non-reserved) nodes to terminate, and terminate them."""
        f = self.fleet
        per = self.per_node[s]
        idle: list[IdleNode] = []
        min_idle = self.loop.node_scaler.min_idle_s
        sku_id, idle_since, up_since, n_pool, pools = self.sku_ids[s], f.n_idle_since, f.n_up_since, f.n_pool, f.pools
        # what an IdleNode reads of its pool, per pool index (nothing changes the pools in this loop); the tuples
        # are built by tuple.__new__, the named tuple's own constructor without its Python-level frame
        of_pool: dict[int, tuple[str, str, int, float]] = {}
        new = tuple.__new__
        for tier in LAUNCHED_TIERS:
            for n in f.index.iter_with_free(s, TIER_RANK[tier], per):  # nothing changes the index in this loop
                idle_s = now - idle_since[n]
                if idle_s < min_idle:
                    continue
                pi = n_pool[n]
                got = of_pool.get(pi)
                if got is None:
                    pr = pools[pi]
                    got = of_pool[pi] = (pr.pool.id, pr.tier_name, pr.pool.node_start_s, pr.price_usd)
                pool_id, tier_name, node_start_s, price = got
                idle.append(
                    new(
                        IdleNode,
                        (n, pool_id, sku_id, tier_name, per, idle_s, now - up_since[n], node_start_s, price),
                    )
                )
        if not idle:
            return
        keep = self.buffer_nodes(s)
        keep_spot = self.spot_buffer_gpus(s)
        ctx = ScaleDownContext(
            now,
            self.sku_ids[s],
            idle,
            self.queues.pending_gpus[s],
            self.free_gpus(s),
            self.capacity_gpus(s),
            self.forecasts.upcoming(s, now),
            self.demand_now(s),
            self.on_demand_price(s),
            frozenset(pr.pool.id for pr in f.pools if pr.sku_idx == s and not pr.in_stock),
            unreachable_gang_gpus=self.unreachable_gang_gpus(s) if self.queues.pending_gpus[s] > 0 else 0,
            keep_free_gpus=keep * per,
            buffer_free_gpus=self.free_gpus(s, TIERS_NO_SPOT) if keep else 0,
            keep_free_spot_gpus=keep_spot,
            spot_free_gpus=self.free_gpus(s, (SPOT_RANK,)) if keep_spot else 0,
        )
        for node, reason in self.loop.node_scaler.scale_down(ctx):
            pool = f.pools[f.n_pool[node]].pool
            f.terminate(node, now)
            self.metrics.placement(f"terminate_{reason}")
            self.decisions.add(now, "node_scaler", "scale_down", reason, pool, per)

    def on_demand_price(self, s: int) -> float:
        """The SKU's on-demand price per GPU-hour (0 if it has no on-demand pool)."""
        for pr in self.fleet.pools:
            if pr.sku_idx == s and pr.pool.tier is Tier.ON_DEMAND:
                return float(pr.pool.price_usd_per_gpu_h)
        return 0.0

    def capacity_gpus(self, s: int) -> int:
        """GPUs on the SKU's schedulable nodes (the nodes in the index, read off its buckets)."""
        per = self.per_node[s]
        buckets = self.fleet.index.buckets[s]
        return per * sum([len(b) for t in TIERS_ALL for b in buckets[t][: per + 1]])

    def free_gpus(self, s: int, tiers: tuple[int, ...] = TIERS_ALL) -> int:
        """Free GPUs on the SKU's schedulable nodes of ``tiers`` (tier ranks; the start buffer counts
        ``TIERS_NO_SPOT``, the tiers every job may use)."""
        per = self.per_node[s]
        buckets = self.fleet.index.buckets[s]
        return sum([free * len(buckets[t][free]) for t in tiers for free in range(1, per + 1)])

    def demand_now(self, s: int) -> float:
        return float(sum(pr.alloc_gpus for pr in self.fleet.pools if pr.sku_idx == s) + self.queues.pending_gpus[s])


class NodeEvents:
    """What happens to nodes: they start, fail and are repaired, spot nodes are preempted, on-demand stock runs out
    and comes back. Failure and preemption clocks are common random numbers keyed per node (sim/crn.py); a node
    that goes down interrupts its pods through the scheduling part."""

    def __init__(
        self,
        *,
        fleet: Fleet,
        q: EventQueue,
        scheduling: Scheduling,
        provisioner: Provisioner,
        metrics: Metrics,
        failures: FailureSpec,
        pool_specs: dict[int, PoolSpec],
        seed: int,
        rng_stock: np.random.Generator,
        horizon_s: int,
    ) -> None:
        self.fleet = fleet
        self.q = q
        self.scheduling = scheduling
        self.provisioner = provisioner
        self.metrics = metrics
        self.failures = failures
        self.pool_specs = pool_specs
        self.seed = seed
        self.rng_stock = rng_stock
        self.horizon_s = horizon_s
        self.node_failures = 0
        self.spot_preemptions = 0

    def node_alive(self, node: int, now: int) -> None:
        """A node became schedulable: arm its failure (and spot preemption) clocks."""
        f = self.fleet
        pidx = f.n_pool[node]
        pr = f.pools[pidx]
        key = (pidx, f.n_ordinal[node], f.n_lives[node])  # common random numbers: see sim/crn.py
        f.n_lives[node] += 1
        mtbf_s = self.failures.node_mtbf_days * DAY_S
        t_fail = now + int(keyed_exponential(mtbf_s, self.seed, FAIL, *key)) + 1
        if t_fail <= self.horizon_s:
            self.q.schedule(t_fail, NODE_FAIL, node, f.n_epoch[node])
        rate = pr.pool.preemption_rate_per_h
        if rate > 0:
            t_pre = now + int(keyed_exponential(HOUR_S / rate, self.seed, PREEMPT, *key)) + 1
            if t_pre <= self.horizon_s:
                self.q.schedule(t_pre, SPOT_PREEMPT, node, f.n_epoch[node])

    def on_node_up(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.PROVISIONING:
            return
        s = f.n_sku[node]
        if node in self.provisioner.base_starting:
            self.provisioner.base_starting.discard(node)
        else:
            # a launched node keeps its pool while it starts (only reserved nodes change pool, at their expiry)
            self.provisioner.inflight_tier_gpus[s][f.pools[f.n_pool[node]].tier_rank] -= f.n_total[node]
        f.node_up(node, now)
        self.node_alive(node, now)
        self.scheduling.drain_queue(s, now)

    def _evict_all(self, node: int, now: int) -> None:
        for pod in list(self.fleet.n_pods[node]):
            self.scheduling.interrupt(pod, now)

    def on_node_fail(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.UP:
            return
        self.node_failures += 1
        f.node_down(node)  # out of the index first so evicted pods do not land back on it
        self._evict_all(node, now)
        self.q.schedule(now + int(self.failures.repair_h * HOUR_S), NODE_REPAIR, node, f.n_epoch[node])

    def on_node_repair(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.DOWN:
            return
        f.node_up(node, now)
        self.node_alive(node, now)
        self.scheduling.drain_queue(f.n_sku[node], now)

    def on_spot_preempt(self, now: int, node: int, epoch: int) -> None:
        f = self.fleet
        if f.n_epoch[node] != epoch or f.n_state[node] != NodeState.UP:
            return
        self.spot_preemptions += 1
        f.node_down(node)
        self._evict_all(node, now)
        f.terminate(node, now)

    def on_stock(self, now: int, pidx: int, _b: int) -> None:
        pr = self.fleet.pools[pidx]
        pr.in_stock = not pr.in_stock
        self.metrics.stockout(pr.in_stock)
        self.schedule_stock_toggle(pidx, now)

    def schedule_stock_toggle(self, pidx: int, now: int) -> None:
        pr = self.fleet.pools[pidx]
        spec = self.pool_specs[pr.sku_idx]
        if spec.on_demand_mean_stockout_h <= 0:  # a stock-out lasts no time: the pool is never out of stock
            return
        mean_h = spec.on_demand_mean_in_stock_h if pr.in_stock else spec.on_demand_mean_stockout_h
        t = now + int(self.rng_stock.exponential(mean_h * HOUR_S)) + 1
        if t <= self.horizon_s:
            self.q.schedule(t, STOCK, pidx)
