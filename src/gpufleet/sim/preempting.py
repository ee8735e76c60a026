"""Preemption in the simulated world: the busy nodes offered to the scheduling stage's planner, and its plans applied.

A part of :class:`~gpufleet.sim.scheduling.Scheduling` (it owns one, :attr:`Scheduling.preemption`). A pod that
finds no room asks :meth:`Preemption.try_preempt`: the world offers the stage a bounded set of busy nodes with the
running pods on them it may evict (:class:`~gpufleet.control.scheduling.RunningJob`), the stage answers with a
plan and a reason code, and a plan that evicts is applied through the scheduling part (interrupt the victims, place
the pod, let the SKU's queue take what is left).

As applied: victims stop at once; a checkpointable victim keeps its progress except the grace period it spends
checkpointing (the plan's cost), one that cannot checkpoint loses its whole current run. Victims are single-node
training pods (evicting one worker of a gang would stop all of it); serving is never a victim of training (the
plan's rule). A gang preempts only where the loop allows it (``gang_preemption``): it is offered busy nodes whose
every pod is lower-priority single-node training, and the nodes the stage names are emptied whole
(:meth:`Preemption.try_preempt_gang`).

Two memos skip work whose answer is known (each exact, checked call by call in tests/unit/test_sim_fast_paths.py
and test_sim_core_fast_paths.py through :meth:`Preemption.scan_skipped` and :meth:`Preemption.known_failure`):
a scan that offered no victim offers none again until the free-GPU index's version moves on, and a plan that
failed for an ask fails again, with the same reason, at the same (time, index version).
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

from gpufleet.control.scheduling import GangPreemptionPlan, RunningJob, victim_lost_s
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.sim.kinds import PRIO_SERVING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gpufleet.control.scheduling import Eviction, PodAsk
    from gpufleet.sim.scheduling import Scheduling

PREEMPT_SCAN_NODES = 32  # nodes offered to the preemption planner per attempt (fullest-to-free order)
GANG_SCAN_NODES = 64  # busy nodes examined for a gang's preemption plan per attempt


class Preemption:
    """Offers busy nodes to the stage's preemption planner and applies its plans through ``scheduling`` (its
    ``try_place``, ``interrupt``, ``drain_queue`` and decision counters). Owns the running pods as the planner
    sees them (a memo), the two memos of failed attempts, and the preemption counters."""

    def __init__(self, scheduling: Scheduling) -> None:
        self.scheduling = scheduling
        self.pods = scheduling.pods
        self.fleet = scheduling.fleet
        self.sched = scheduling.sched
        self.jobs: dict[int, RunningJob] = {}  # running pods as the preemption planner sees them (memo)
        scheduling.pods.forget_on_end(self.jobs)
        self.preemptions = 0
        self.preempted_lost_gpu_s = 0
        self.serving_preempted_for_training = 0  # must stay 0
        # (SKU, GPUs, priority, tiers) whose preemption scan offered no victim at index version ``_no_victims_at``
        self._no_victims: set[tuple[int, int, int, tuple[int, ...]]] = set()
        self._no_victims_at = -1
        # (SKU, GPUs, priority, tiers, serving, missed requests) -> the reason of the plan that failed for that ask
        # at (time, index version) ``_no_plan_at``
        self._no_plan: dict[tuple[int, int, int, tuple[int, ...], bool, float], str] = {}
        self._no_plan_at = (-1, -1)

    # ------------------------------------------------------------------ what the planner sees
    def running_job(self, pod: int, node: int, now: int) -> RunningJob:
        """The running pod as the preemption planner sees it. Memoised while nothing in it changes (same node, same
        run, same last checkpoint): preemption asks about the same busy nodes again and again."""
        p = self.pods
        ckpt = p.ckpt[pod]
        start = p.start[pod]
        last = start + (now - start) // ckpt * ckpt if ckpt > 0 else None
        hit = self.jobs.get(pod)
        if hit is not None and hit.node == node and hit.started_s == start and hit.last_checkpoint_s == last:
            return hit
        serving = p.serving[pod] >= 0
        job = self.jobs[pod] = RunningJob(
            str(pod),
            WorkloadKind.SERVING if serving else WorkloadKind.TRAINING,
            PRIO_SERVING if serving else p.prio[pod],
            node,
            p.gpus[pod],
            start,
            last,
            ckpt > 0,
        )
        return job

    def missed_while_waiting(self, pod: int, wait_s: int) -> float:
        """Requests a serving replica's fleet misses while the replica waits ``wait_s`` for a node: the requests
        the replica would serve (its target rate x the wait) when the fleet's queue holds a backlog (it grew at
        the last look: arrivals above the ready replicas), else 0 (a replica for a forecast or a spare)."""
        fl = self.pods.serving[pod]
        if fl < 0:
            return 0.0
        fr = self.scheduling.fleets[fl]
        return fr.spec.target_rps_per_replica * wait_s if fr.queue.backlog > 0 else 0.0

    # ------------------------------------------------------------------ the memos, as tests read them
    def scan_skipped(self, ask: PodAsk) -> bool:
        """True if the scan for ``ask`` is known to offer no victim at the index's current version."""
        key = (ask.sku, ask.gpus, ask.priority, ask.tiers)
        return self._no_victims_at == self.fleet.index.version and key in self._no_victims

    def known_failure(self, ask: PodAsk, now: int) -> str | None:
        """The reason of the plan that failed for ``ask`` at this time and index version, if one did (the next
        attempt is answered from it, unless :meth:`scan_skipped` answers first)."""
        if self._no_plan_at != (now, self.fleet.index.version):
            return None
        wait_s = self.scheduling.pool_specs[ask.sku].node_start_s
        missed = self.missed_while_waiting(ask.pod, wait_s)
        return self._no_plan.get((ask.sku, ask.gpus, ask.priority, ask.tiers, ask.serving, missed))

    # ------------------------------------------------------------------ attempts
    def try_preempt(self, pod: int, now: int) -> bool:
        """Ask the stage for a preemption plan over a bounded set of busy nodes; apply it if it says so."""
        sched = self.sched
        sch = self.scheduling
        ask = sch.asks.get(pod) or sch.ask(pod)
        s, g, per, tiers, prio = ask.sku, ask.gpus, ask.per_node, ask.tiers, ask.priority
        if not sched.preemption or prio == 0:
            return False  # nothing ranks below priority 0: no plan could exist
        if g > per:
            return sched.gang_preemption and self.try_preempt_gang(ask, now)
        f = self.fleet
        # The scan below reads only the index's buckets and the pods on the nodes in them, and both change only
        # with the index's version (a node's pods change by allocate or release, each a move in the index while
        # the node is in it): a scan that offered no victim offers none again until the version moves on.
        version = f.index.version
        key = (s, g, prio, tiers)
        if self._no_victims_at == version:
            if key in self._no_victims:
                return False
        else:
            self._no_victims_at = version
            self._no_victims.clear()
        # The plan reads the pod's ask (its id only to name the answer), the offered pods and nodes (fixed by the
        # index's version, as above, and the time), the time, the SKU's node start and the requests its fleet
        # misses while waiting: the same ask at the same (time, version) gets the same failed plan again (the
        # rest of a batch of serving replicas that found no room). Answer it from the first, counting its reason.
        wait_s = sch.pool_specs[s].node_start_s
        missed = self.missed_while_waiting(pod, wait_s)
        ask_key = (s, g, prio, tiers, ask.serving, missed)
        stamp = (now, version)
        if self._no_plan_at == stamp:
            why = self._no_plan.get(ask_key)
            if why is not None:
                sch.sched_reasons[why] += 1
                return False
        else:
            self._no_plan_at = stamp
            self._no_plan.clear()
        running: list[RunningJob] = []
        free_by_node: dict[int, int] = {}
        p_prio, p_gpus = self.pods.prio, self.pods.gpus
        buckets = f.index.buckets[s]  # index.iter_with_free(s, t, free), read off the view
        left = PREEMPT_SCAN_NODES  # nodes still to offer (PREEMPT_SCAN_NODES - len(free_by_node))
        for t in tiers:
            by_free = buckets[t]
            for free in range(g - 1, -1, -1):
                for node in by_free[free]:
                    free_by_node[node] = free
                    for p in f.n_pods[node]:
                        # offered: single-node training of lower priority (the plan applies every rule again)
                        if p_gpus[p] <= per and p_prio[p] < prio:
                            running.append(self.running_job(p, node, now))
                    left -= 1
                    if left <= 0:
                        break
                if left <= 0:
                    break
        if not running:
            self._no_victims.add(key)
            return False
        plan = sched.preempt(ask, running, free_by_node, now, wait_s, missed)
        reason = f"preempt_{plan.reason}"
        sch.sched_reasons[reason] = sch.sched_reasons.get(reason, 0) + 1
        if not hasattr(plan, "evictions"):
            self._no_plan[ask_key] = reason
            return False
        return self._evict_and_place(pod, s, plan.reason, plan.evictions, {j.id: j for j in running}, now)

    def try_preempt_gang(self, ask: PodAsk, now: int) -> bool:
        """Offer the stage the busy nodes a gang may use whose pods are all lower-priority single-node training
        (among the first ``GANG_SCAN_NODES`` busy nodes examined on its tiers, the emptiest first), each with every
        pod on it; empty the nodes it names."""
        sch = self.scheduling
        f = self.fleet
        s, per, prio = ask.sku, ask.per_node, ask.priority
        buckets = f.index.buckets[s]
        free_whole = sum(len(buckets[t][per]) for t in ask.tiers)
        p_prio, p_gpus, p_serving = self.pods.prio, self.pods.gpus, self.pods.serving
        offered: dict[int, list[RunningJob]] = {}
        # the emptiest busy nodes first (the fewest victims), a bounded scan as PREEMPT_SCAN_NODES for one node
        busy = (node for t in ask.tiers for free in range(per - 1, -1, -1) for node in buckets[t][free])
        for node in islice(busy, GANG_SCAN_NODES):
            pods = f.n_pods[node]
            if all(p_serving[q] < 0 and p_gpus[q] <= per and p_prio[q] < prio for q in pods):
                offered[node] = [self.running_job(q, node, now) for q in pods]
        plan = self.sched.preempt_gang(ask, free_whole, offered, now, sch.pool_specs[s].node_start_s)
        reason = f"preempt_{plan.reason}"
        sch.sched_reasons[reason] = sch.sched_reasons.get(reason, 0) + 1
        if not isinstance(plan, GangPreemptionPlan):
            return False
        by_id = {j.id: j for jobs in offered.values() for j in jobs}
        return self._evict_and_place(ask.pod, s, plan.reason, plan.evictions, by_id, now)

    def _evict_and_place(
        self, pod: int, s: int, reason: str, evictions: Sequence[Eviction], by_id: Mapping[str, RunningJob], now: int
    ) -> bool:
        """Apply a preemption plan's evictions (``by_id``: the running jobs offered to it), then place ``pod`` on
        the room they free and let the SKU's queue take what is left."""
        sch = self.scheduling
        for e in evictions:
            victim = int(e.job_id)
            job = by_id[e.job_id]
            if job.kind is WorkloadKind.SERVING and self.pods.serving[pod] < 0:
                self.serving_preempted_for_training += 1  # must stay 0 (the plan's rule); checked by tests
            lost = victim_lost_s(job, now, self.sched.grace_s)
            self.preemptions += 1
            self.preempted_lost_gpu_s += lost * self.pods.gpus[victim]
            sch.interrupt(victim, now, lost, drain=False)
            sch.decisions.add(
                now, "schedule", "preempt", reason, None, self.pods.gpus[victim], unit="pods", sku=sch.sku_ids[s]
            )
        placed = sch.try_place(pod, now)
        sch.drain_queue(s, now)
        return placed
