"""The simulated world: composed parts wired together, and the event loop that dispatches to them.

The world keeps the physics (time, nodes, failures, preemptions, arrivals, traffic, queues) and applies decisions;
every decision comes from a control stage (control/): placement (fallback chain), scheduling (quota admission, the
scenario's scheduler policy, gangs, preemption), autoscaling, forecasting, procurement and approval.

Parts (each owns its state; collaborators are passed to its constructor, none reaches into another's state):

- :class:`~gpufleet.sim.pods.PodTable` every pod's columns and the one gate of pod states;
  :class:`~gpufleet.sim.pods.WorkQueues` the queued and parked pods; :class:`~gpufleet.sim.pods.Billing` the
  ledger charges of running segments;
- :class:`~gpufleet.sim.fleet.Fleet` pools and nodes; :class:`~gpufleet.sim.engine.EventQueue` time;
  :class:`~gpufleet.sim.metrics.Metrics` and :class:`~gpufleet.sim.decisions.DecisionLog` what is recorded;
- :class:`~gpufleet.sim.freeing.FreeingEstimates` reported job ends and the nodes they free;
- :class:`~gpufleet.sim.nodes.Provisioner` scale-up and scale-down; :class:`~gpufleet.sim.nodes.NodeEvents`
  node start, failure, repair, spot preemption, stock-outs;
- :class:`~gpufleet.sim.scheduling.Scheduling` admission, placement, preemption, the queues' drain, interruption;
- :class:`~gpufleet.sim.serving.ServingFleets` traffic, request queues and replicas;
- :class:`~gpufleet.sim.moves.Consolidation` runs moved onto idle reserved nodes and drained part-used nodes;
- :class:`~gpufleet.sim.forecasts.ForecastBook` and :class:`~gpufleet.sim.desk.ReservationDesk` forecasts,
  procurement, approval and the reservation book.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from decimal import Decimal

import numpy as np

from gpufleet.control.loop import ControlLoop
from gpufleet.control.metering import Ledger
from gpufleet.control.scheduling import TeamQuota
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.domain.skus import SKUS_BY_ID
from gpufleet.sim import demand
from gpufleet.sim.decisions import DecisionLog
from gpufleet.sim.desk import ReservationDesk, registrations
from gpufleet.sim.engine import EventQueue
from gpufleet.sim.fleet import Fleet
from gpufleet.sim.forecasts import ForecastBook
from gpufleet.sim.freeing import FreeingEstimates
from gpufleet.sim.kinds import ARRIVE, DAILY, DAY_S, HOUR_S, QUEUED, RUNNING, SPOT_RANK, TICK, ranks
from gpufleet.sim.lifecycle import NodeState
from gpufleet.sim.metrics import Metrics
from gpufleet.sim.moves import DRAIN_PERIOD_S, Consolidation
from gpufleet.sim.nodes import NodeEvents, Provisioner
from gpufleet.sim.pods import Billing, PodTable, WorkQueues
from gpufleet.sim.scenario import PoolSpec, Scenario
from gpufleet.sim.scheduling import Scheduling
from gpufleet.sim.serving import ServingFleets, build_fleets

GC_YOUNG = 20_000  # allocations between collections of the youngest generation while the event loop runs


class World:
    def __init__(self, sc: Scenario, loop: ControlLoop, seed: int | None = None) -> None:
        self.sc = sc
        self.loop = loop
        self.seed = sc.seed if seed is None else seed
        ss = np.random.SeedSequence(self.seed)
        # spawned streams 2 and 3 (failures, preemptions) are left unused: those draws are keyed per node (crn.py)
        r_demand, r_serving, _r_fail, _r_spot, r_stock, r_plan = (np.random.default_rng(s) for s in ss.spawn(6))
        self.horizon_s = horizon = sc.days * DAY_S
        self.period_s = period = sc.control.control_period_s
        self.q = q = EventQueue()
        ledger = Ledger()

        self.sku_ids = sku_ids = sorted({p.sku for p in sc.pools})
        self.per_node = per_node = [SKUS_BY_ID[s].gpus_per_node for s in sku_ids]
        self.fleet = fleet = Fleet(sku_ids, per_node)
        self.pool_specs: dict[int, PoolSpec] = {}
        self._build_pools()
        sched = loop.scheduler(sku_ids, per_node, self.seed)
        admission = loop.admission(
            [
                TeamQuota(t.team, t.cohort, t.sku, t.nominal_gpus, t.borrowing_limit_gpus, t.lending_limit_gpus)
                for t in sc.quotas
            ]
        )

        # --- pods: training jobs first (ids 0..n_jobs-1), serving replicas appended later ---
        batches = [demand.experiments(e, sc.days, r_demand) for e in sc.experiments]
        batches.append(demand.planned(sc.planned_runs, r_plan))
        jobs = demand.merge(batches)
        index = {k: i for i, k in enumerate(sku_ids)}
        self.pods = pods = PodTable(jobs, [index[k] for k in jobs.sku], self._tier_orders())
        q.add_stream(jobs.arrival_s.tolist(), ARRIVE, priority=4)
        self.fleets = fleets = build_fleets(sc.serving, sku_ids, horizon, period, r_serving)

        # --- the parts, each with its collaborators ---
        self.queues = queues = WorkQueues(len(sku_ids))
        self.metrics = metrics = Metrics(sku_ids, [f.spec.name for f in fleets], sc.days)
        self.decisions = decisions = DecisionLog()  # what the loop decided, as applied (sim/decisions.py)
        self.forecasts = forecasts = ForecastBook(loop.forecaster, len(sku_ids))
        self.freeing = freeing = FreeingEstimates(pods, fleet, per_node, self.seed, sc.control.eta_error_sd)
        self.billing = billing = Billing(pods, fleet, per_node, ledger, sc.serving)
        self.provisioner = provisioner = Provisioner(
            pods=pods,
            queues=queues,
            q=q,
            loop=loop,
            freeing=freeing,
            forecasts=forecasts,
            sku_ids=sku_ids,
            per_node=per_node,
            pool_specs=self.pool_specs,
            fleet=fleet,
            metrics=metrics,
            decisions=decisions,
            warm_start=sc.warm_start,
        )
        self.scheduling = scheduling = Scheduling(
            pods=pods,
            queues=queues,
            q=q,
            sched=sched,
            admission=admission,
            provisioner=provisioner,
            freeing=freeing,
            billing=billing,
            fleets=fleets,
            sku_ids=sku_ids,
            per_node=per_node,
            pool_specs=self.pool_specs,
            fleet=fleet,
            metrics=metrics,
            decisions=decisions,
        )
        self.serving = ServingFleets(
            fleets=fleets,
            pods=pods,
            queues=queues,
            scheduling=scheduling,
            loop=loop,
            metrics=metrics,
            decisions=decisions,
            sku_ids=sku_ids,
            period_s=period,
            q=q,
        )
        self.node_events = node_events = NodeEvents(
            fleet=fleet,
            q=q,
            scheduling=scheduling,
            provisioner=provisioner,
            metrics=metrics,
            failures=sc.failures,
            pool_specs=self.pool_specs,
            seed=self.seed,
            rng_stock=r_stock,
            horizon_s=horizon,
        )
        self.consolidation = Consolidation(
            pods=pods,
            q=q,
            loop=loop,
            freeing=freeing,
            billing=billing,
            scheduling=scheduling,
            sku_ids=sku_ids,
            per_node=per_node,
            horizon_s=horizon,
            fleet=fleet,
            metrics=metrics,
            decisions=decisions,
        )
        self.desk = ReservationDesk(
            q=q,
            loop=loop,
            forecasts=forecasts,
            billing=billing,
            scheduling=scheduling,
            node_events=node_events,
            control=sc.control,
            sku_ids=sku_ids,
            per_node=per_node,
            pool_specs=self.pool_specs,
            horizon_s=horizon,
            fleet=fleet,
            metrics=metrics,
            decisions=decisions,
            planned_runs=registrations(sc.planned_runs),
        )
        self.closed = False

        self.desk.initial_reservations()
        for i, pr in enumerate(fleet.pools):
            if pr.pool.tier is Tier.ON_DEMAND:
                node_events.schedule_stock_toggle(i, 0)
        q.schedule(0, TICK, priority=1)
        q.schedule(0, DAILY, priority=0)

    # ------------------------------------------------------------------ setup
    def _build_pools(self) -> None:
        """Four pools per SKU from the built-in catalog; capacity ceilings: quota, spot and secondary stock."""
        for spec in self.sc.pools:
            secondary_lead_s = int(spec.secondary_lead_time_h * HOUR_S)
            pools = default_pools(
                spec.sku,
                spec.region,
                on_demand_quota_gpus=spec.on_demand_quota_gpus,
                spot_preemption_rate_per_h=spec.spot_preemption_rate_per_h,
                secondary_lead_time_s=secondary_lead_s,
                reserved_lead_time_s=int(spec.reserved_lead_time_h * HOUR_S),
                reserved_term_months=spec.reserved_term_months,
                node_start_s=spec.node_start_s,
                secondary_node_start_s=secondary_lead_s,
            )
            ceilings = {
                Tier.RESERVED: None,
                Tier.ON_DEMAND: spec.on_demand_quota_gpus,
                Tier.SPOT: spec.spot_capacity_gpus,
                Tier.SECONDARY: spec.secondary_capacity_gpus,
            }
            for pool in pools:
                self.fleet.add_pool(pool, ceilings[pool.tier])
            self.pool_specs[self.sku_ids.index(spec.sku)] = spec

    def _tier_orders(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Per SKU, the tier ranks a pod may use in the order the loop places it on running nodes (its prices):
        (any other pod, checkpointed training)."""
        prices: dict[int, dict[Tier, Decimal]] = {}
        for pr in self.fleet.pools:
            prices.setdefault(pr.sku_idx, {})[pr.pool.tier] = pr.pool.price_usd_per_gpu_h
        return [
            (ranks(self.loop.running_tiers(False, prices[s])), ranks(self.loop.running_tiers(True, prices[s])))
            for s in range(len(self.sku_ids))
        ]

    @property
    def ledger(self) -> Ledger:
        """The ledger of running segments charged so far (billing sums them until it is read)."""
        return self.billing.ledger

    # ------------------------------------------------------------------ main loop
    def run(self, progress: Callable[[float], None] | None = None, until_s: int | None = None) -> None:
        """Process events up to ``until_s`` (default: the horizon). Running to the horizon closes the books."""
        q = self.q
        sch, nodes, desk = self.scheduling, self.node_events, self.desk
        handlers = (  # indexed by event kind (sim/kinds.py)
            sch.on_arrive,
            sch.on_job_end,
            nodes.on_node_up,
            nodes.on_node_fail,
            nodes.on_node_repair,
            nodes.on_spot_preempt,
            self.on_tick,
            desk.on_daily,
            desk.on_res_event,
            nodes.on_stock,
            self.serving.on_ready,
            sch.on_recheck,
            self.serving.on_observe,
        )
        horizon = self.horizon_s
        stop = horizon if until_s is None else min(until_s, horizon)
        next_report = q.now_s + DAY_S
        # The cyclic collector, during the loop: what exists before it (the scenario, the pod table, the imported
        # libraries) is frozen out of the collections, and the youngest generation is collected less often. The
        # event loop makes few cycles; this changes when garbage is freed, never a decision.
        # A caller that froze objects itself keeps its freeze: only a freeze made here is undone here.
        thresholds = gc.get_threshold()
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        gc.set_threshold(GC_YOUNG, *thresholds[1:])
        try:
            if progress is None:
                q.dispatch(stop, handlers)
            while progress is not None:  # a day at a time when progress is reported (it changes nothing)
                upto = min(stop, next_report)
                q.dispatch(upto, handlers)
                if upto >= stop:
                    break
                progress(upto / horizon)
                next_report += DAY_S
        finally:
            gc.set_threshold(*thresholds)
            if freeze:
                gc.unfreeze()
        if stop == horizon and not self.closed:
            self._close(horizon)

    def on_tick(self, now: int, _a: int, _b: int) -> None:
        """The control tick: serve the period that ended, then per SKU retry parked and queued pods, scale idle
        nodes down and offer consolidation; sample the hourly series."""
        self.serving.on_tick(now)
        sch, prov, cons = self.scheduling, self.provisioner, self.consolidation
        parked = self.queues.parked
        drain = self.loop.consolidation and now % DRAIN_PERIOD_S == 0
        for s in range(len(self.sku_ids)):
            if parked[s]:
                sch.retry_parked(s, now)
            sch.retry_queue(s, now)
            prov.scale_down_idle(s, now)
            prov.top_up_buffer(s, now)
            cons.consolidate(s, now)
            if drain:
                cons.drain_part_used(s, now)
        if now % HOUR_S == 0:
            self._sample(now)
        if now + self.period_s <= self.horizon_s:
            self.q.schedule(now + self.period_s, TICK, priority=1)

    def _sample(self, now: int) -> None:
        f = self.fleet
        pending = self.queues.pending_gpus
        for s in range(len(self.sku_ids)):
            paid = {t.value: 0 for t in Tier}
            alloc = 0
            for pr in f.pools:
                if pr.sku_idx == s:
                    paid[pr.pool.tier.value] += pr.paid_gpus
                    alloc += pr.alloc_gpus
            self.metrics.hourly(now, s, alloc, pending[s], paid)
            self.provisioner.hold_base(s, now)
        self.provisioner.hold_buffer(now)
        for pr in f.pools:
            pr.touch(now)  # integrals are exact at any split: this only reads the cost so far
        self.metrics.cost_so_far(now, sum(pr.price_uusd * pr.paid_gpu_s for pr in f.pools))

    def _close(self, end_s: int) -> None:
        """Bill running work up to the end of the horizon, so the ledger and the integrals cover the same time."""
        self.closed = True
        self.q.now_s = end_s
        state, charge = self.pods.state, self.billing.charge
        for pod in range(len(state)):
            if state[pod] == RUNNING:
                charge(pod, end_s)
        for pr in self.fleet.pools:
            pr.touch(end_s)

    # ------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """Raise AssertionError if the fleet's books disagree: used by tests after (or during) a run."""
        f = self.fleet
        used = [0] * len(f.n_sku)
        for pod, nodes in enumerate(self.pods.nodes):
            if nodes:
                assert self.pods.state[pod] == RUNNING, f"pod {pod} holds nodes but is not running"
                g = self.pods.gpus[pod]
                per = self.per_node[self.pods.sku[pod]]
                for n in nodes:
                    used[n] += g if g <= per else per
                    if self.pods.serving[pod] >= 0 or self.pods.ckpt[pod] == 0:
                        assert f.pools[f.n_pool[n]].tier_rank != SPOT_RANK, f"pod {pod} may not run on spot"
        for n in range(len(f.n_sku)):
            assert 0 <= f.n_free[n] <= f.n_total[n], f"node {n} free {f.n_free[n]} of {f.n_total[n]}"
            assert used[n] == f.n_total[n] - f.n_free[n], (
                f"node {n}: pods hold {used[n]}, books say {f.n_total[n] - f.n_free[n]}"
            )
            if f.n_state[n] != NodeState.UP:
                assert used[n] == 0, f"node {n} is not up but holds {used[n]} GPUs"
        for pr in f.pools:
            assert 0 <= pr.alloc_gpus <= pr.paid_gpus, f"pool {pr.pool.id}: alloc {pr.alloc_gpus} > paid {pr.paid_gpus}"
            assert pr.alloc_gpu_s <= pr.paid_gpu_s
        self._check_scheduling()

    def _check_scheduling(self) -> None:
        """Gangs whole, quota books exact and within limits, serving never preempted for training."""
        for pod, nodes in enumerate(self.pods.nodes):
            if self.pods.state[pod] == RUNNING:
                g, per = self.pods.gpus[pod], self.per_node[self.pods.sku[pod]]
                want = 1 if g <= per else g // per
                assert len(set(nodes)) == want, f"pod {pod} ({g} GPUs) runs on {len(set(nodes))} nodes, not {want}"
        assert self.scheduling.serving_preempted_for_training == 0
        adm = self.scheduling.admission
        book = adm.book
        held: dict[tuple[str, str], int] = {}
        for pod, (team, flavor, g) in adm.held.items():
            assert self.pods.state[pod] in (QUEUED, RUNNING), f"pod {pod} holds quota in state {self.pods.state[pod]}"
            held[(team, flavor)] = held.get((team, flavor), 0) + g
        cohorts: set[tuple[str, str]] = set()
        for key, q in book.quotas.items():
            used = book.usage[key]
            assert used == held.get(key, 0), f"quota {key}: book {used} != held {held.get(key, 0)}"
            if q.borrowing_limit_gpus is not None:
                assert used - q.nominal_gpus <= q.borrowing_limit_gpus, f"{key} borrows over its limit"
            cohorts.add((q.cohort, q.flavor))
        for cohort, flavor in cohorts:
            members = book.members(cohort, flavor)
            assert sum(book.pool_use(m) for m in members) <= book.pool_gpus(cohort, flavor), (
                f"cohort {cohort} overdrawn"
            )
