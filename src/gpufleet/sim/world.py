"""The simulated world: events, pods (training jobs and serving replicas), serving fleets and reservations.

The world owns state and applies decisions; every decision comes from a control stage (control/): placement
(fallback chain), scheduling (quota admission, the scenario's scheduler policy, gangs, preemption: see
sim/scheduling.py), autoscaling, forecasting, procurement and approval.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from gpufleet.control.loop import ControlLoop
from gpufleet.control.metering import Ledger
from gpufleet.control.scheduling import PodAsk, RunningJob, TeamQuota
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import Reservation
from gpufleet.domain.skus import SKUS_BY_ID
from gpufleet.domain.workloads import ServingScaling, lost_work_s
from gpufleet.ports import (
    DemandForecast,
)
from gpufleet.sim import demand
from gpufleet.sim.decisions import DecisionLog
from gpufleet.sim.desk import ReservationDesk
from gpufleet.sim.engine import EventQueue
from gpufleet.sim.fleet import Fleet
from gpufleet.sim.freeing import FreeingBounds, FreeingMixin
from gpufleet.sim.kinds import (
    ARRIVE,
    DAILY,
    DAY_S,
    DONE,
    HOUR_S,
    PRIO_SERVING,
    QUEUED,
    REMOVED,
    RUNNING,
    SPOT_RANK,
    TICK,
    TIERS_ALL,
    TIERS_NO_SPOT,
)
from gpufleet.sim.lifecycle import POD_NEXT, NodeState, pod_gate
from gpufleet.sim.metrics import Metrics
from gpufleet.sim.moves import DRAIN_PERIOD_S, MoveMixin
from gpufleet.sim.nodes import NodeLifecycleMixin
from gpufleet.sim.queueing import PeriodQueue
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.scheduling import BACKFILL_SCAN, SchedulingMixin
from gpufleet.sim.serving import FleetRuntime, ServingMixin


class World(ReservationDesk, ServingMixin, FreeingMixin, NodeLifecycleMixin, MoveMixin, SchedulingMixin):
    def __init__(self, sc: Scenario, loop: ControlLoop, seed: int | None = None) -> None:
        self.sc = sc
        self.loop = loop
        self.seed = sc.seed if seed is None else seed
        ss = np.random.SeedSequence(self.seed)
        # spawned streams 2 and 3 (failures, preemptions) are left unused: those draws are keyed per node (crn.py)
        r_demand, r_serving, _r_fail, _r_spot, r_stock, r_plan = (np.random.default_rng(s) for s in ss.spawn(6))
        self.rng_stock = r_stock
        self.horizon_s = sc.days * DAY_S
        self.q = EventQueue()
        self.ledger = Ledger()
        self.period_s = sc.control.control_period_s

        sku_ids = sorted({p.sku for p in sc.pools})
        self.sku_ids = sku_ids
        self.per_node = [SKUS_BY_ID[s].gpus_per_node for s in sku_ids]
        self.fleet = Fleet(sku_ids, self.per_node)
        self._build_pools()
        self.sched = loop.scheduler(sku_ids, self.per_node, self.seed)
        self.admission = loop.admission(
            [
                TeamQuota(q.team, q.cohort, q.sku, q.nominal_gpus, q.borrowing_limit_gpus, q.lending_limit_gpus)
                for q in sc.quotas
            ]
        )

        # --- pods: training jobs first (ids 0..n_jobs-1), serving replicas appended later ---
        batches = [demand.experiments(e, sc.days, r_demand) for e in sc.experiments]
        batches.append(demand.planned(sc.planned_runs, r_plan))
        jobs = demand.merge(batches)
        self.n_jobs = len(jobs.arrival_s)
        sku_of_job = self._job_skus(jobs)
        self.p_gpus: list[int] = jobs.gpus.tolist()
        self.p_sku: list[int] = sku_of_job
        self.p_prio: list[int] = jobs.priority.tolist()
        self.p_ckpt: list[int] = jobs.ckpt_s.tolist()
        self.p_remaining: list[int] = jobs.work_s.tolist()
        self.p_work: list[int] = jobs.work_s.tolist()
        self.p_arrival: list[int] = jobs.arrival_s.tolist()
        self.p_team: list[str] = jobs.team
        self.p_group: list[str] = jobs.group
        self.p_serving: list[int] = [-1] * self.n_jobs  # fleet index for serving replicas
        self.p_state: list[int] = [0] * self.n_jobs
        self.p_epoch: list[int] = [0] * self.n_jobs
        self.p_start: list[int] = [0] * self.n_jobs  # start of the current run (checkpoint phase)
        self.p_seg: list[int] = [0] * self.n_jobs  # start of the current billing segment
        self.p_first_start: list[int] = [-1] * self.n_jobs
        self.p_nodes: list[tuple[int, ...]] = [()] * self.n_jobs  # the nodes each pod runs on (immutable)
        self.p_ready: list[bool] = [False] * self.n_jobs  # serving replicas: past their cold start
        self.p_tenant_of_team = {t: f"{t}-internal" for t in set(jobs.team)}
        self.q.add_stream(jobs.arrival_s.tolist(), ARRIVE, priority=4)

        # --- serving fleets ---
        ticks = np.arange(0, self.horizon_s + self.period_s, self.period_s)
        self.fleets: list[FleetRuntime] = []
        for spec in sc.serving:
            scaling = ServingScaling(
                spec.min_replicas,
                spec.max_replicas,
                spec.target_rps_per_replica,
                spec.cold_start_s,
                spec.scale_down_delay_s,
            )
            rps = demand.serving_rps(spec, ticks, r_serving)
            queue = PeriodQueue(spec.queue, 1.0 / spec.target_rps_per_replica, spec.slo_s)
            self.fleets.append(FleetRuntime(spec, scaling, sku_ids.index(spec.sku), rps, queue))

        # --- queues and counters ---
        n_sku = len(sku_ids)
        self.queue: list[list[deque[int]]] = [[deque() for _ in range(4)] for _ in range(n_sku)]
        self.pending_gpus = [0] * n_sku
        self.parked: list[deque[int]] = [deque() for _ in range(n_sku)]  # pods waiting for their team's quota
        self.sched_reasons: dict[str, int] = {}  # scheduling decisions by reason code
        self.quota_reasons: dict[str, int] = {}  # quota admissions by reason code
        self.preemptions = 0
        self.preempted_lost_gpu_s = 0
        self.serving_preempted_for_training = 0  # must stay 0
        self.reclaims = 0
        self.reclaimed_gpus = 0
        self._asks: dict[int, PodAsk] = {}  # live pods as the scheduling stage sees them (sim/scheduling.py)
        self._jobs: dict[int, RunningJob] = {}  # running pods as the preemption planner sees them (memo)
        self.drains = 0  # part-used launched nodes emptied by consolidation (sim/moves.py)
        self.drain_moves = 0
        self.lender_refused = 0  # within-nominal admissions refused although quota was lent (must stay 0)
        self.inflight_gpus = [0] * n_sku  # GPUs on nodes still provisioning
        self.freeing_claims: list[dict[int, int]] = [{} for _ in range(n_sku)]  # pod -> freeing nodes it waits for
        self._eta_memo: dict[int, tuple[int, float]] = {}  # pod -> (run epoch, ETA factor), see sim/freeing.py
        self._freeing_bounds: dict[tuple[int, int], FreeingBounds] = {}  # (sku, window) -> bounds, sim/freeing.py
        self._freeing_memo: dict[int, tuple[tuple[int, int, int, int, tuple[int, ...], int], list[int]]] = {}
        self.metrics = Metrics(sku_ids, [f.spec.name for f in self.fleets], sc.days)
        self.decisions = DecisionLog()  # what the loop decided, as applied (sim/decisions.py)
        self.reservations: list[Reservation] = []
        self.res_nodes: list[list[int]] = []
        self.res_pool: list[int] = []
        self.lost_gpu_s = 0
        self.max_lost_over_ckpt = 0.0  # max over interruptions of lost_s / ckpt_s (<= 1 by contract)
        self.spot_violations = 0  # pods on spot that must not be there (should stay 0)
        self.interruptions = 0
        self.node_failures = 0
        self.spot_preemptions = 0
        self.moves = 0  # runs moved onto free reserved nodes (sim/moves.py)
        self.moved_redo_gpu_s = 0  # the part of lost_gpu_s that moves redid (since their last checkpoint)
        self.forecasts: dict[int, tuple[int, DemandForecast]] = {}  # sku -> (issued hour, hourly forecast)
        self.forecast_abs_err = [0.0] * n_sku
        self.forecast_actual = [0.0] * n_sku
        self.approvals_pending: dict[int, tuple[bool, str]] = {}
        self.closed = False

        self._initial_reservations()
        for i, pr in enumerate(self.fleet.pools):
            if pr.pool.tier is Tier.ON_DEMAND:
                self._schedule_stock_toggle(i, 0)
        self.q.schedule(0, TICK, priority=1)
        self.q.schedule(0, DAILY, priority=0)

    # ------------------------------------------------------------------ setup
    def _build_pools(self) -> None:
        """Four pools per SKU from the built-in catalog; capacity ceilings: quota, spot and secondary stock."""
        self.pool_specs = {}
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

    def _job_skus(self, jobs: demand.JobBatch) -> list[int]:
        index = {k: i for i, k in enumerate(self.sku_ids)}
        return [index[k] for k in jobs.sku]

    # ------------------------------------------------------------------ main loop
    def run(self, progress: Callable[[float], None] | None = None, until_s: int | None = None) -> None:
        """Process events up to ``until_s`` (default: the horizon). Running to the horizon closes the books."""
        q = self.q
        handlers = (
            self._on_arrive,
            self._on_job_end,
            self._on_node_up,
            self._on_node_fail,
            self._on_node_repair,
            self._on_spot_preempt,
            self._on_tick,
            self._on_daily,
            self._on_res_event,
            self._on_stock,
            self._on_ready,
            self._on_recheck,
        )
        horizon = self.horizon_s
        stop = horizon if until_s is None else min(until_s, horizon)
        next_report = q.now_s + DAY_S
        pop = q.pop_until
        while True:
            ev = pop(stop)
            if ev is None:
                break
            handlers[ev[3]](ev[0], ev[4], ev[5])
            if progress is not None and ev[0] >= next_report:
                progress(ev[0] / horizon)
                next_report += DAY_S
        if stop == horizon and not self.closed:
            self._close(horizon)

    def _close(self, end_s: int) -> None:
        """Bill running work up to the end of the horizon, so the ledger and the integrals cover the same time."""
        self.closed = True
        self.q.now_s = end_s
        for pod in range(len(self.p_state)):
            if self.p_state[pod] == RUNNING:
                self._charge(pod, end_s)
        for pr in self.fleet.pools:
            pr.touch(end_s)

    def check_invariants(self) -> None:
        """Raise AssertionError if the fleet's books disagree: used by tests after (or during) a run."""
        f = self.fleet
        used = [0] * len(f.n_sku)
        for pod, nodes in enumerate(self.p_nodes):
            if nodes:
                assert self.p_state[pod] == RUNNING, f"pod {pod} holds nodes but is not running"
                g = self.p_gpus[pod]
                per = self.per_node[self.p_sku[pod]]
                for n in nodes:
                    used[n] += g if g <= per else per
                    if self.p_serving[pod] >= 0 or self.p_ckpt[pod] == 0:
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
        for pod, nodes in enumerate(self.p_nodes):
            if self.p_state[pod] == RUNNING:
                g, per = self.p_gpus[pod], self.per_node[self.p_sku[pod]]
                want = 1 if g <= per else g // per
                assert len(set(nodes)) == want, f"pod {pod} ({g} GPUs) runs on {len(set(nodes))} nodes, not {want}"
        assert self.serving_preempted_for_training == 0
        adm = self.admission
        book = adm.book
        held: dict[tuple[str, str], int] = {}
        for pod, (team, flavor, g) in adm.held.items():
            assert self.p_state[pod] in (QUEUED, RUNNING), f"pod {pod} holds quota in state {self.p_state[pod]}"
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

    # ------------------------------------------------------------------ pods
    def _set_state(self, pod: int, target: int) -> None:
        """Every pod state change goes through the gate of sim/lifecycle.py (its table, read inline here)."""
        cur = self.p_state[pod]
        if target not in POD_NEXT[cur]:
            pod_gate(pod, cur, target)  # raises InvalidTransition
        self.p_state[pod] = target
        if target in (DONE, REMOVED):
            self._asks.pop(pod, None)
            self._jobs.pop(pod, None)

    def _tiers(self, pod: int) -> tuple[int, ...]:
        return TIERS_ALL if (self.p_ckpt[pod] > 0 and self.p_serving[pod] < 0) else TIERS_NO_SPOT

    def _charge(self, pod: int, now: int) -> None:
        """Bill the pod's GPUs from the start of its billing segment to ``now`` and open a new segment."""
        f = self.fleet
        dt = now - self.p_seg[pod]
        if dt <= 0:
            return
        self.p_seg[pod] = now
        g = self.p_gpus[pod]
        per = self.per_node[self.p_sku[pod]]
        gpn = g if g <= per else per
        fl = self.p_serving[pod]
        if fl >= 0:
            spec = self.fleets[fl].spec
            team, tenant, group = spec.team, spec.tenant, f"serving/{spec.name}"
        else:
            team = self.p_team[pod]
            tenant, group = self.p_tenant_of_team[team], self.p_group[pod]
        nodes = self.p_nodes[pod]
        pools = f.pools
        n_pool = f.n_pool
        first = n_pool[nodes[0]]
        if len(nodes) == 1 or all(n_pool[n] == first for n in nodes):  # the common case: one charge per pod
            pr = pools[first]
            self.ledger.charge(
                team=team,
                tenant=tenant,
                workload=group,
                tier=pr.tier_name,
                price_uusd=pr.price_uusd,
                gpus=gpn * len(nodes),
                seconds=dt,
            )
            return
        for node in nodes:
            pr = pools[n_pool[node]]
            self.ledger.charge(
                team=team,
                tenant=tenant,
                workload=group,
                tier=pr.tier_name,
                price_uusd=pr.price_uusd,
                gpus=gpn,
                seconds=dt,
            )

    def _release(self, pod: int, now: int, *, drain: bool = True) -> None:
        """Charge the running segment, free the pod's GPUs and its quota; ``drain``: let queued pods take them."""
        self._charge(pod, now)
        f = self.fleet
        g = self.p_gpus[pod]
        per = self.per_node[self.p_sku[pod]]
        gpn = g if g <= per else per
        s = self.p_sku[pod]
        for node in self.p_nodes[pod]:
            f.release(node, pod, gpn, now)
        self.p_nodes[pod] = ()
        self.p_epoch[pod] += 1
        self._eta_memo.pop(pod, None)  # the next run draws its own ETA factor
        self.admission.release(pod)
        if drain and self.pending_gpus[s] > 0:
            self._drain_queue(s, now)

    def _enqueue(self, pod: int, now: int) -> None:
        s = self.p_sku[pod]
        self._set_state(pod, QUEUED)
        prio = PRIO_SERVING if self.p_serving[pod] >= 0 else self.p_prio[pod]
        self.queue[s][prio].append(pod)
        self.pending_gpus[s] += self.p_gpus[pod]
        self._provision(s, now, pod)

    def _interrupt(
        self, pod: int, now: int, lost_s: int | None = None, *, requeue: bool = True, drain: bool = True
    ) -> None:
        """A node under the pod failed or was preempted: lose work since the last checkpoint (or ``lost_s``, as
        a preemption plan costed it), requeue (re-admitted by quota) unless ``requeue`` is False."""
        run_s = now - self.p_start[pod]
        ckpt = self.p_ckpt[pod]
        fl = self.p_serving[pod]
        self._release(pod, now, drain=drain)
        self.interruptions += 1
        if fl >= 0:  # a lost replica is replaced by the autoscaler at the next tick
            fr = self.fleets[fl]
            fr.pods.remove(pod)
            if self.p_ready[pod]:
                fr.ready_change(now, -1)
                self.p_ready[pod] = False
            self._set_state(pod, REMOVED)
            return
        lost = lost_work_s(run_s, ckpt if ckpt > 0 else None) if lost_s is None else min(lost_s, run_s)
        if ckpt > 0:
            self.max_lost_over_ckpt = max(self.max_lost_over_ckpt, lost / ckpt)
        self.lost_gpu_s += lost * self.p_gpus[pod]
        self.p_remaining[pod] -= run_s - lost
        if requeue:
            self._requeue(pod, now)
        else:
            self._set_state(pod, QUEUED)  # the caller parks or queues it

    def _drain_queue(self, s: int, now: int) -> None:
        """Place queued pods of SKU ``s`` in priority order, head first with a bounded backfill scan."""
        if self.pending_gpus[s] <= 0:
            return
        scanned = 0
        for prio in (3, 2, 1, 0):
            dq = self.queue[s][prio]
            kept: list[int] = []
            while dq and scanned < BACKFILL_SCAN:
                pod = dq.popleft()
                if self.p_state[pod] != QUEUED:
                    continue  # removed while queued
                scanned += 1
                if self._try_place(pod, now):
                    self.pending_gpus[s] -= self.p_gpus[pod]
                else:
                    kept.append(pod)
            dq.extendleft(reversed(kept))
            if scanned >= BACKFILL_SCAN:
                return

    # ------------------------------------------------------------------ handlers
    def _on_arrive(self, now: int, job: int, _b: int) -> None:
        self.sched.observe(self._ask(job))
        self._start(job, now)

    def _on_job_end(self, now: int, pod: int, epoch: int) -> None:
        if self.p_epoch[pod] != epoch or self.p_state[pod] != RUNNING:
            return
        self.p_remaining[pod] = 0
        self._set_state(pod, DONE)
        self._release(pod, now)
        self.metrics.job_done()
        if self.parked[self.p_sku[pod]]:
            self._retry_parked(self.p_sku[pod], now)

    def _on_ready(self, now: int, pod: int, epoch: int) -> None:
        if self.p_epoch[pod] != epoch or self.p_state[pod] != RUNNING:
            return
        fr = self.fleets[self.p_serving[pod]]
        fr.ready_change(now, 1)
        fr.cold_starts += 1
        self.p_ready[pod] = True

    def _on_recheck(self, now: int, pod: int, epoch: int) -> None:
        """A pod waited for nodes expected to free: if it is still queued, place it or provision for it."""
        s = self.p_sku[pod]
        self.freeing_claims[s].pop(pod, None)
        if self.p_epoch[pod] != epoch or self.p_state[pod] != QUEUED:
            return
        self._drain_queue(s, now)
        if self.p_state[pod] == QUEUED:
            self._provision(s, now, pod)

    # ------------------------------------------------------------------ control tick
    def _on_tick(self, now: int, _a: int, _b: int) -> None:
        k = now // self.period_s
        for i, fr in enumerate(self.fleets):
            self._serve_period(i, fr, k, now)
        for s in range(len(self.sku_ids)):
            if self.parked[s]:
                self._retry_parked(s, now)
            self._retry_queue(s, now)
            self._scale_down_idle(s, now)
            self._consolidate(s, now)
            if self.loop.consolidation and now % DRAIN_PERIOD_S == 0:
                self._drain_part_used(s, now)
        if now % HOUR_S == 0:
            self._sample(now)
        if now + self.period_s <= self.horizon_s:
            self.q.schedule(now + self.period_s, TICK, priority=1)

    def _retry_queue(self, s: int, now: int) -> None:
        if self.pending_gpus[s] <= 0:
            return
        self._drain_queue(s, now)
        # launch for the head of the queue while demand exceeds capacity on its way
        for prio in (3, 2, 1, 0):
            for pod in list(self.queue[s][prio])[:BACKFILL_SCAN]:
                if self.p_state[pod] == QUEUED and not self._provision(s, now, pod):
                    break

    def _sample(self, now: int) -> None:
        f = self.fleet
        for s in range(len(self.sku_ids)):
            paid = {t.value: 0 for t in Tier}
            alloc = 0
            for pr in f.pools:
                if pr.sku_idx == s:
                    paid[pr.pool.tier.value] += pr.paid_gpus
                    alloc += pr.alloc_gpus
            self.metrics.hourly(now, s, alloc, self.pending_gpus[s], paid)
        for pr in f.pools:
            pr.touch(now)  # integrals are exact at any split: this only reads the cost so far
        self.metrics.cost_so_far(now, sum(pr.price_uusd * pr.paid_gpu_s for pr in f.pools))
