"""Applying the scheduling stage's decisions in the simulated world: quota admission, placement, preemption.

A mixin of :class:`~gpufleet.sim.world.World`. Every decision comes from ``control/scheduling.py``: the world
describes the pod (:class:`PodAsk`) and the cluster (its free-GPU index, node racks, the running pods it offers as
victims), the stage answers with a decision and a reason code, and this module applies it (allocates, evicts,
parks). Pod flow: arrive -> admit (team quota; else PARKED) -> place (else preempt, else QUEUED and provision).
A pod holds its quota from admission until it stops running; an interrupted pod is re-admitted.

Preemption, as applied: victims stop at once; a checkpointable victim keeps its progress except the grace
period it spends checkpointing (the plan's cost), one that cannot checkpoint loses its whole current run.
Victims are single-node training pods (evicting one worker of a gang would stop all of it); serving is never a
victim of training (the plan's rule) and multi-node pods never preempt.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from gpufleet.control.scheduling import Bind, FleetScheduler, PodAsk, QuotaAdmission, RunningJob, victim_lost_s
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.sim.kinds import (
    JOB_END,
    PARKED,
    PRIO_SERVING,
    QUEUED,
    READY,
    RUNNING,
    SPOT_RANK,
    TIERS_ALL,
    TIERS_NO_SPOT,
)

if TYPE_CHECKING:
    from gpufleet.control.scheduling import Reclaim
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.scenario import PoolSpec
    from gpufleet.sim.serving import FleetRuntime

PREEMPT_SCAN_NODES = 32  # nodes offered to the preemption planner per attempt (fullest-to-free order)
BACKFILL_SCAN = 16  # queued (or parked) pods examined per SKU when capacity (or quota) frees up


class SchedulingMixin:
    """Mixin: admission, placement and preemption as the scheduling stage decides them."""

    if TYPE_CHECKING:
        q: EventQueue
        fleet: Fleet
        sched: FleetScheduler
        admission: QuotaAdmission
        fleets: list[FleetRuntime]
        sku_ids: list[str]
        per_node: list[int]
        pool_specs: dict[int, PoolSpec]
        pending_gpus: list[int]
        parked: list[deque[int]]
        sched_reasons: dict[str, int]
        decisions: DecisionLog
        quota_reasons: dict[str, int]
        spot_violations: int
        _asks: dict[int, PodAsk]
        _jobs: dict[int, RunningJob]
        preemptions: int
        preempted_lost_gpu_s: int
        serving_preempted_for_training: int
        reclaims: int
        reclaimed_gpus: int
        lender_refused: int
        p_ckpt: list[int]
        p_epoch: list[int]
        p_first_start: list[int]
        p_gpus: list[int]
        p_nodes: list[tuple[int, ...]]
        p_prio: list[int]
        p_remaining: list[int]
        p_seg: list[int]
        p_serving: list[int]
        p_sku: list[int]
        p_start: list[int]
        p_state: list[int]
        p_team: list[str]

        def _tiers(self, pod: int) -> tuple[int, ...]: ...
        def _set_state(self, pod: int, target: int) -> None: ...
        def _enqueue(self, pod: int, now: int) -> None: ...
        def _drain_queue(self, s: int, now: int) -> None: ...
        def _interrupt(
            self, pod: int, now: int, lost_s: int | None = None, *, requeue: bool = True, drain: bool = True
        ) -> None: ...

    # ------------------------------------------------------------------ observations
    def _ask(self, pod: int) -> PodAsk:
        """The pod as the scheduling stage sees it (memoised while the pod lives: none of it changes)."""
        got = self._asks.get(pod)
        if got is None:
            s = self.p_sku[pod]
            serving = self.p_serving[pod] >= 0
            got = self._asks[pod] = PodAsk(
                pod,
                s,
                self.p_gpus[pod],
                self.per_node[s],
                TIERS_NO_SPOT if serving or self.p_ckpt[pod] <= 0 else TIERS_ALL,  # as World._tiers
                PRIO_SERVING if serving else self.p_prio[pod],
                serving,
            )
        return got

    def _running_job(self, pod: int, node: int, now: int) -> RunningJob:
        """The running pod as the preemption planner sees it. Memoised while nothing in it changes (same node, same
        run, same last checkpoint): preemption asks about the same busy nodes again and again."""
        ckpt = self.p_ckpt[pod]
        start = self.p_start[pod]
        last = start + (now - start) // ckpt * ckpt if ckpt > 0 else None
        hit = self._jobs.get(pod)
        if hit is not None and hit.node == node and hit.started_s == start and hit.last_checkpoint_s == last:
            return hit
        serving = self.p_serving[pod] >= 0
        job = self._jobs[pod] = RunningJob(
            str(pod),
            WorkloadKind.SERVING if serving else WorkloadKind.TRAINING,
            PRIO_SERVING if serving else self.p_prio[pod],
            node,
            self.p_gpus[pod],
            start,
            last,
            ckpt > 0,
        )
        return job

    # ------------------------------------------------------------------ flow
    def _start(self, pod: int, now: int) -> None:
        """A pod that wants to run: admit, place, else preempt, else queue (or park without quota)."""
        if not self._admit(pod, now):
            self._park(pod)
        elif not self._try_place(pod, now) and not self._try_preempt(pod, now):
            self._enqueue(pod, now)

    def _requeue(self, pod: int, now: int) -> None:
        """An interrupted pod (it released its quota): queue it again if its team's quota admits it."""
        if self._admit(pod, now):
            self._enqueue(pod, now)
        else:
            self._park(pod)

    def _park(self, pod: int) -> None:
        self._set_state(pod, PARKED)
        self.parked[self.p_sku[pod]].append(pod)

    def _retry_parked(self, s: int, now: int) -> None:
        """Pods waiting for quota, oldest first (bounded scan): admit and start the ones the quota now allows."""
        dq = self.parked[s]
        scanned = 0
        kept: list[int] = []
        while dq and scanned < BACKFILL_SCAN:
            pod = dq.popleft()
            if self.p_state[pod] != PARKED:
                continue  # removed while parked
            scanned += 1
            if self._admit(pod, now):
                if not self._try_place(pod, now):
                    self._enqueue(pod, now)
            else:
                kept.append(pod)
        dq.extendleft(reversed(kept))

    # ------------------------------------------------------------------ admission
    def _admit(self, pod: int, now: int) -> bool:
        adm = self.admission
        team = self.p_team[pod]
        flavor = self.sku_ids[self.p_sku[pod]]
        if pod in adm.held or (team, flavor) not in adm.book.quotas:  # held already, or a team without quota
            return True
        g = self.p_gpus[pod]
        a = adm.check(team, flavor, g)
        reasons = self.quota_reasons
        reasons[a.reason] = reasons.get(a.reason, 0) + 1
        if a.decision == "reject":
            return False
        if a.decision == "admit_after_reclaim":
            for r in a.reclaims:
                self._reclaim(r, flavor, pod, now)
            a = adm.check(team, flavor, g)
            if a.decision != "admit":
                self.lender_refused += 1  # a lender within its nominal could not get its quota back
                return False
        adm.hold(pod, a)
        return True

    def _reclaim(self, r: Reclaim, flavor: str, requester: int, now: int) -> None:
        """Take lent quota back: evict (or un-admit, if still queued) the borrower's pods the stage names."""
        adm = self.admission
        training = self.p_serving[requester] < 0
        cands: list[RunningJob] = []
        for pod, (team, fl, _g) in adm.held.items():
            if team != r.team or fl != flavor:
                continue
            if self.p_state[pod] == RUNNING:
                if training and self.p_serving[pod] >= 0:
                    continue  # serving is never preempted for training
                cands.append(self._running_job(pod, self.p_nodes[pod][0], now))
            else:  # admitted and queued: giving its quota back costs no work
                cands.append(RunningJob(str(pod), WorkloadKind.TRAINING, 0, -1, self.p_gpus[pod], now, now, True))
        victims = adm.reclaim_victims(r, cands, now, self.sched.grace_s)
        by_id = {c.id: c for c in cands}
        for v in victims:
            pod = int(v)
            self.reclaimed_gpus += self.p_gpus[pod]
            if self.p_state[pod] == RUNNING:
                self._interrupt(pod, now, victim_lost_s(by_id[v], now, self.sched.grace_s), requeue=False)
            else:
                adm.release(pod)
                if self.p_state[pod] == QUEUED:
                    self.pending_gpus[self.p_sku[pod]] -= self.p_gpus[pod]
            if self.p_serving[pod] < 0:  # a reclaimed serving replica is gone; the autoscaler replaces it
                self._park(pod)
        if victims:
            self.reclaims += 1

    # ------------------------------------------------------------------ placement
    def _try_place(self, pod: int, now: int) -> bool:
        f = self.fleet
        ask = self._asks.get(pod) or self._ask(pod)
        d = self.sched.place(ask, f.index, f.n_rack)
        if not isinstance(d, Bind):
            return False
        g = ask.gpus
        per = ask.per_node
        gpn = g if g <= per else per
        nodes = d.nodes
        allocate = f.allocate
        for node in nodes:
            allocate(node, pod, gpn, now)
        self.p_nodes[pod] = nodes
        reasons = self.sched_reasons
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
        if ask.tiers is TIERS_NO_SPOT:
            for node in nodes:
                if f.pools[f.n_pool[node]].tier_rank == SPOT_RANK:
                    self.spot_violations += 1
        self._set_state(pod, RUNNING)
        self.p_start[pod] = now
        self.p_seg[pod] = now
        epoch = self.p_epoch[pod] + 1
        self.p_epoch[pod] = epoch
        fl = self.p_serving[pod]
        if fl >= 0:
            self.q.schedule(now + self.fleets[fl].spec.cold_start_s, READY, pod, epoch)
        else:
            if self.p_first_start[pod] < 0:
                self.p_first_start[pod] = now
            self.q.schedule(now + self.p_remaining[pod], JOB_END, pod, epoch)
        return True

    def _try_preempt(self, pod: int, now: int) -> bool:
        """Ask the stage for a preemption plan over a bounded set of busy nodes; apply it if it says so."""
        sched = self.sched
        s = self.p_sku[pod]
        g = self.p_gpus[pod]
        per = self.per_node[s]
        prio = PRIO_SERVING if self.p_serving[pod] >= 0 else self.p_prio[pod]
        if not sched.preemption or g > per or prio == 0:
            return False  # nothing ranks below priority 0: no plan could exist
        f = self.fleet
        running: list[RunningJob] = []
        free_by_node: dict[int, int] = {}
        p_prio, p_gpus = self.p_prio, self.p_gpus
        for t in self._tiers(pod):
            for free in range(g - 1, -1, -1):
                for node in f.index.iter_with_free(s, t, free):
                    free_by_node[node] = free
                    for p in f.n_pods[node]:
                        # offered: single-node training of lower priority (the plan applies every rule again)
                        if p_gpus[p] <= per and p_prio[p] < prio:
                            running.append(self._running_job(p, node, now))
                    if len(free_by_node) >= PREEMPT_SCAN_NODES:
                        break
                if len(free_by_node) >= PREEMPT_SCAN_NODES:
                    break
        if not running:
            return False
        plan = sched.preempt(self._ask(pod), running, free_by_node, now, self.pool_specs[s].node_start_s)
        self.sched_reasons[f"preempt_{plan.reason}"] = self.sched_reasons.get(f"preempt_{plan.reason}", 0) + 1
        if not hasattr(plan, "evictions"):
            return False
        by_id = {j.id: j for j in running}
        for e in plan.evictions:
            victim = int(e.job_id)
            job = by_id[e.job_id]
            if job.kind is WorkloadKind.SERVING and self.p_serving[pod] < 0:
                self.serving_preempted_for_training += 1  # must stay 0 (the plan's rule); checked by tests
            lost = victim_lost_s(job, now, sched.grace_s)
            self.preemptions += 1
            self.preempted_lost_gpu_s += lost * self.p_gpus[victim]
            self._interrupt(victim, now, lost, drain=False)
            self.decisions.add(
                now, "schedule", "preempt", plan.reason, None, self.p_gpus[victim], unit="pods", sku=self.sku_ids[s]
            )
        placed = self._try_place(pod, now)
        self._drain_queue(s, now)
        return placed
