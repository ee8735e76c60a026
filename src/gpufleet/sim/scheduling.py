"""Applying the scheduling stage's decisions in the simulated world: quota admission, placement, the queues.

A part of :class:`~gpufleet.sim.world.World`. Every decision comes from ``control/scheduling.py``: the world
describes the pod (:class:`PodAsk`) and the cluster (its free-GPU index, node racks, the running pods it offers as
victims), the stage answers with a decision and a reason code, and this module applies it (allocates, evicts,
parks). Pod flow: arrive -> admit (team quota; else PARKED) -> place (else preempt, else QUEUED and provision).
A pod holds its quota from admission until it stops running; an interrupted pod loses the work since its last
checkpoint and is re-admitted. Queued pods are placed in priority order, head first with a bounded backfill scan,
whenever capacity frees up. Preemption (the busy nodes offered to the planner, its plans applied) is its own
part, :class:`~gpufleet.sim.preempting.Preemption`, owned by :class:`Scheduling` as ``preemption``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING

from gpufleet.control.scheduling import (
    Bind,
    FleetScheduler,
    PodAsk,
    QuotaAdmission,
    RunningJob,
    victim_lost_s,
)
from gpufleet.domain.workloads import WorkloadKind, lost_work_s
from gpufleet.sim.kinds import (
    DONE,
    JOB_END,
    PARKED,
    PRIO_SERVING,
    QUEUED,
    READY,
    REMOVED,
    RUNNING,
    SPOT_RANK,
    TIERS_ALL,
    TIERS_NO_SPOT,
)
from gpufleet.sim.lifecycle import POD_NEXT, pod_gate
from gpufleet.sim.preempting import Preemption

if TYPE_CHECKING:
    from gpufleet.control.scheduling import Reclaim
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.freeing import FreeingEstimates
    from gpufleet.sim.metrics import Metrics
    from gpufleet.sim.nodes import Provisioner
    from gpufleet.sim.pods import Billing, PodTable, WorkQueues
    from gpufleet.sim.scenario import PoolSpec
    from gpufleet.sim.serving import FleetRuntime

BACKFILL_SCAN = 16  # queued (or parked) pods examined per SKU when capacity (or quota) frees up
NO_LIMIT = 1 << 62


class FleetCrowd(Mapping[int, int]):
    """Node -> replicas of serving fleet ``fleet`` running there, counted on demand from the node's pods (the spread
    rule reads a few nodes per placement; counting every replica of a large fleet per placement cost ~20 % of a
    year's simulation). Truthy always: an empty fleet reads 0 everywhere, which the rule treats as no crowd."""

    __slots__ = ("_fleet", "_n_pods", "_serving")

    def __init__(self, n_pods: list[list[int]], serving: list[int], fleet: int) -> None:
        self._n_pods, self._serving, self._fleet = n_pods, serving, fleet

    def _count(self, node: int) -> int:
        serving, fleet = self._serving, self._fleet
        return sum(1 for q in self._n_pods[node] if serving[q] == fleet)

    def __getitem__(self, node: int) -> int:
        c = self._count(node) if 0 <= node < len(self._n_pods) else 0
        if not c:
            raise KeyError(node)
        return c

    def get(self, node: int, default: int | None = None) -> int | None:  # type: ignore[override]
        c = self._count(node)
        return c if c else default

    def __iter__(self) -> Iterator[int]:
        return (n for n in range(len(self._n_pods)) if self._count(n))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return True


class NoRoom:
    """Pods that found no room during one pass over a queue of one SKU, as the smallest such size on all tiers and
    on the tiers without spot. Placing only takes GPUs, so until something is released a pod as large or larger,
    allowed on the same tiers or fewer, finds no room either (a single-node pod needs a node with that many free
    GPUs; a gang needs that many whole free nodes) and need not be asked again."""

    __slots__ = ("all_tiers", "no_spot")

    def __init__(self) -> None:
        self.all_tiers = NO_LIMIT
        self.no_spot = NO_LIMIT

    def rules_out(self, ask: PodAsk) -> bool:
        g = ask.gpus
        return g >= self.all_tiers or (g >= self.no_spot and SPOT_RANK not in ask.tiers)

    def add(self, ask: PodAsk) -> None:
        if SPOT_RANK in ask.tiers:  # every tier, in any order (checkpointed training)
            self.all_tiers = min(self.all_tiers, ask.gpus)
        else:
            self.no_spot = min(self.no_spot, ask.gpus)


class Scheduling:
    """Admission, placement, preemption and the queues, as the scheduling stage decides them; and the physics of a
    pod that stops running (released, interrupted: its lost work). Owns the scheduler's views of the pods (memos)
    and the scheduling counters."""

    def __init__(
        self,
        *,
        pods: PodTable,
        queues: WorkQueues,
        fleet: Fleet,
        q: EventQueue,
        sched: FleetScheduler,
        admission: QuotaAdmission,
        provisioner: Provisioner,
        freeing: FreeingEstimates,
        billing: Billing,
        fleets: list[FleetRuntime],
        metrics: Metrics,
        decisions: DecisionLog,
        sku_ids: list[str],
        per_node: list[int],
        pool_specs: dict[int, PoolSpec],
    ) -> None:
        self.pods = pods
        self.queues = queues
        self.fleet = fleet
        self.q = q
        self.sched = sched
        self.admission = admission
        self.provisioner = provisioner
        self.freeing = freeing
        self._run_ended = freeing.eta_memo.pop  # FreeingEstimates.run_ended, bound to the C call (hot path)
        self.billing = billing
        self.fleets = fleets
        self.metrics = metrics
        self.decisions = decisions
        self.sku_ids = sku_ids
        self.per_node = per_node
        self.pool_specs = pool_specs
        self.asks: dict[int, PodAsk] = {}  # live pods as the scheduling stage sees them
        pods.forget_on_end(self.asks)
        self.preemption = Preemption(self)  # offers busy nodes to the planner, applies its plans (sim/preempting.py)
        self.sched_reasons: dict[str, int] = {}  # scheduling decisions by reason code
        self.quota_reasons: dict[str, int] = {}  # quota admissions by reason code
        self.reclaims = 0
        self.reclaimed_gpus = 0
        self.lender_refused = 0  # within-nominal admissions refused although quota was lent (must stay 0)
        self.spot_violations = 0  # pods on spot that must not be there (should stay 0)
        self.interruptions = 0
        self.lost_gpu_s = 0  # work lost to interruptions (consolidation counts its own: sim/moves.py)
        self.max_lost_over_ckpt = 0.0  # max over interruptions of lost_s / ckpt_s (<= 1 by contract)

    # ------------------------------------------------------------------ observations
    def ask(self, pod: int) -> PodAsk:
        """The pod as the scheduling stage sees it (memoised while the pod lives: none of it changes)."""
        p = self.pods
        got = self.asks.get(pod)
        if got is None:
            s = p.sku[pod]
            serving = p.serving[pod] >= 0
            ckpt = p.ckpt[pod] > 0 and not serving  # p.tiers(pod), inlined
            got = self.asks[pod] = tuple.__new__(  # the named tuple, built without its Python-level __new__ frame
                PodAsk,
                (
                    pod,
                    s,
                    p.gpus[pod],
                    self.per_node[s],
                    p.tier_orders[s][ckpt] if p.tier_orders else (TIERS_ALL if ckpt else TIERS_NO_SPOT),
                    PRIO_SERVING if serving else p.prio[pod],
                    serving,
                ),
            )
        return got

    @property
    def preemptions(self) -> int:
        return self.preemption.preemptions

    @property
    def preempted_lost_gpu_s(self) -> int:
        return self.preemption.preempted_lost_gpu_s

    @property
    def serving_preempted_for_training(self) -> int:
        """Serving replicas evicted for training (must stay 0: the plan's rule)."""
        return self.preemption.serving_preempted_for_training

    # ------------------------------------------------------------------ flow
    def start(self, pod: int, now: int) -> None:
        """A pod that wants to run: admit, place, else preempt, else queue (or park without quota)."""
        if not self.admit(pod, now):
            self.park(pod)
        elif not self.try_place(pod, now) and not self.preemption.try_preempt(pod, now):
            self.enqueue(pod, now)

    def requeue(self, pod: int, now: int) -> None:
        """An interrupted pod (it released its quota): queue it again if its team's quota admits it."""
        if self.admit(pod, now):
            self.enqueue(pod, now)
        else:
            self.park(pod)

    def park(self, pod: int) -> None:
        self.pods.set_state(pod, PARKED)
        self.queues.parked[self.pods.sku[pod]].append(pod)

    def retry_parked(self, s: int, now: int) -> None:
        """Pods waiting for quota, oldest first (bounded scan): admit and start the ones the quota now allows."""
        dq = self.queues.parked[s]
        scanned = 0
        kept: list[int] = []
        while dq and scanned < BACKFILL_SCAN:
            pod = dq.popleft()
            if self.pods.state[pod] != PARKED:
                continue  # removed while parked
            scanned += 1
            if self.admit(pod, now):
                if not self.try_place(pod, now):
                    self.enqueue(pod, now)
            else:
                kept.append(pod)
        dq.extendleft(reversed(kept))

    # ------------------------------------------------------------------ admission
    def admit(self, pod: int, now: int) -> bool:
        adm = self.admission
        team = self.pods.team[pod]
        flavor = self.sku_ids[self.pods.sku[pod]]
        if pod in adm.held or (team, flavor) not in adm.book.quotas:  # held already, or a team without quota
            return True
        g = self.pods.gpus[pod]
        a = adm.check_and_hold(pod, team, flavor, g)
        reasons = self.quota_reasons
        reasons[a.reason] = reasons.get(a.reason, 0) + 1
        if a.decision == "admit":
            return True  # held already
        if a.decision == "reject":
            return False
        if a.decision == "admit_after_reclaim":
            for r in a.reclaims:
                self.reclaim(r, flavor, pod, now)
            a = adm.check(team, flavor, g)
            if a.decision != "admit":
                self.lender_refused += 1  # a lender within its nominal could not get its quota back
                return False
        adm.hold(pod, a)
        return True

    def reclaim(self, r: Reclaim, flavor: str, requester: int, now: int) -> None:
        """Take lent quota back: evict (or un-admit, if still queued) the borrower's pods the stage names."""
        adm = self.admission
        training = self.pods.serving[requester] < 0
        cands: list[RunningJob] = []
        for pod, (team, fl, _g) in adm.held.items():
            if team != r.team or fl != flavor:
                continue
            if self.pods.state[pod] == RUNNING:
                if training and self.pods.serving[pod] >= 0:
                    continue  # serving is never preempted for training
                cands.append(self.preemption.running_job(pod, self.pods.nodes[pod][0], now))
            else:  # admitted and queued: giving its quota back costs no work
                cands.append(RunningJob(str(pod), WorkloadKind.TRAINING, 0, -1, self.pods.gpus[pod], now, now, True))
        victims = adm.reclaim_victims(r, cands, now, self.sched.grace_s)
        by_id = {c.id: c for c in cands}
        for v in victims:
            pod = int(v)
            self.reclaimed_gpus += self.pods.gpus[pod]
            if self.pods.state[pod] == RUNNING:
                self.interrupt(pod, now, victim_lost_s(by_id[v], now, self.sched.grace_s), requeue=False)
            else:
                adm.release(pod)
                if self.pods.state[pod] == QUEUED:
                    self.queues.pending_gpus[self.pods.sku[pod]] -= self.pods.gpus[pod]
            if self.pods.serving[pod] < 0:  # a reclaimed serving replica is gone; the autoscaler replaces it
                self.park(pod)
        if victims:
            self.reclaims += 1

    # ------------------------------------------------------------------ placement
    def try_place(self, pod: int, now: int) -> bool:
        f = self.fleet
        ask = self.asks.get(pod) or self.ask(pod)
        fl = self.pods.serving[pod]
        if fl >= 0 and self.sched.spread is not None:  # the fleet's replicas per node, for the spread rule
            crowd = FleetCrowd(f.n_pods, self.pods.serving, fl)
            d = self.sched.place(ask, f.index, f.n_rack, crowd, len(self.fleets[fl].pods))
        else:
            d = self.sched.place(ask, f.index, f.n_rack)
        if not isinstance(d, Bind):
            return False
        p = self.pods
        g = ask.gpus
        per = ask.per_node
        gpn = g if g <= per else per
        nodes = d.nodes
        allocate = f.allocate
        for node in nodes:
            allocate(node, pod, gpn, now)
        p.nodes[pod] = nodes
        reasons = self.sched_reasons
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
        if SPOT_RANK not in ask.tiers:
            for node in nodes:
                if f.pools[f.n_pool[node]].tier_rank == SPOT_RANK:
                    self.spot_violations += 1
        cur = p.state[pod]  # PodTable.set_state(pod, RUNNING), inlined (RUNNING drops no memo)
        if RUNNING not in POD_NEXT[cur]:
            pod_gate(pod, cur, RUNNING)
        p.state[pod] = RUNNING
        p.start[pod] = now
        p.seg[pod] = now
        epoch = p.epoch[pod] + 1
        p.epoch[pod] = epoch
        fl = p.serving[pod]
        if fl >= 0:
            cold = self.fleets[fl].spec.cold_start_s
            self.q.schedule(now + self.provisioner.start_delay_s(cold, now), READY, pod, epoch)
        else:
            if p.first_start[pod] < 0:
                p.first_start[pod] = now
            self.q.schedule(now + p.remaining[pod], JOB_END, pod, epoch)
        return True

    def release(self, pod: int, now: int, *, drain: bool = True) -> None:
        """Charge the running segment, free the pod's GPUs and its quota; ``drain``: let queued pods take them."""
        p = self.pods
        self.billing.charge(pod, now)
        g = p.gpus[pod]
        s = p.sku[pod]
        per = self.per_node[s]
        gpn = g if g <= per else per
        release = self.fleet.release
        for node in p.nodes[pod]:
            release(node, pod, gpn, now)
        p.nodes[pod] = ()
        p.epoch[pod] += 1
        self._run_ended(pod, None)  # the next run draws its own ETA factor
        self.admission.release(pod)
        if drain and self.queues.pending_gpus[s] > 0:
            self.drain_queue(s, now)

    def enqueue(self, pod: int, now: int) -> None:
        p = self.pods
        s = p.sku[pod]
        p.set_state(pod, QUEUED)
        prio = PRIO_SERVING if p.serving[pod] >= 0 else p.prio[pod]
        self.queues.queue[s][prio].append(pod)
        self.queues.pending_gpus[s] += p.gpus[pod]
        self.provisioner.provision(s, now, pod)

    def interrupt(
        self, pod: int, now: int, lost_s: int | None = None, *, requeue: bool = True, drain: bool = True
    ) -> None:
        """A node under the pod failed or was preempted: lose work since the last checkpoint (or ``lost_s``, as
        a preemption plan costed it), requeue (re-admitted by quota) unless ``requeue`` is False."""
        p = self.pods
        run_s = now - p.start[pod]
        ckpt = p.ckpt[pod]
        fl = p.serving[pod]
        self.release(pod, now, drain=drain)
        self.interruptions += 1
        if fl >= 0:  # a lost replica is replaced by the autoscaler at the next tick
            fr = self.fleets[fl]
            fr.pods.remove(pod)
            if p.ready[pod]:
                fr.ready_change(now, -1)
                p.ready[pod] = False
            p.set_state(pod, REMOVED)
            return
        lost = lost_work_s(run_s, ckpt if ckpt > 0 else None) if lost_s is None else min(lost_s, run_s)
        if ckpt > 0:
            self.max_lost_over_ckpt = max(self.max_lost_over_ckpt, lost / ckpt)
        self.lost_gpu_s += lost * p.gpus[pod]
        p.remaining[pod] -= run_s - lost
        if requeue:
            self.requeue(pod, now)
        else:
            p.set_state(pod, QUEUED)  # the caller parks or queues it

    def drain_queue(self, s: int, now: int) -> None:
        """Place queued pods of SKU ``s`` in priority order, head first with a bounded backfill scan."""
        p = self.pods
        if self.queues.pending_gpus[s] <= 0:
            return
        scanned = 0
        no_room: NoRoom | None = None  # made at the first pod that finds no room
        asks = self.asks
        for prio in (3, 2, 1, 0):
            dq = self.queues.queue[s][prio]
            kept: list[int] = []
            while dq and scanned < BACKFILL_SCAN:
                pod = dq.popleft()
                if p.state[pod] != QUEUED:
                    continue  # removed while queued
                scanned += 1
                ask = asks.get(pod) or self.ask(pod)
                if no_room is not None and no_room.rules_out(ask):
                    kept.append(pod)  # try_place would say no: nothing was freed since a smaller pod found none
                elif self.try_place(pod, now):
                    self.queues.pending_gpus[s] -= ask.gpus
                else:
                    kept.append(pod)
                    if no_room is None:
                        no_room = NoRoom()
                    no_room.add(ask)
            dq.extendleft(reversed(kept))
            if scanned >= BACKFILL_SCAN:
                return

    # ------------------------------------------------------------------ handlers
    def on_arrive(self, now: int, job: int, _b: int) -> None:
        self.sched.observe(self.ask(job))
        self.start(job, now)

    def on_job_end(self, now: int, pod: int, epoch: int) -> None:
        p = self.pods
        if p.epoch[pod] != epoch or p.state[pod] != RUNNING:
            return
        p.remaining[pod] = 0
        p.set_state(pod, DONE)
        self.release(pod, now)
        self.metrics.job_done()
        if self.queues.parked[p.sku[pod]]:
            self.retry_parked(p.sku[pod], now)

    def on_recheck(self, now: int, pod: int, epoch: int) -> None:
        """A pod waited for nodes expected to free: if it is still queued, place it or provision for it."""
        s = self.pods.sku[pod]
        self.freeing.claims[s].pop(pod, None)
        if self.pods.epoch[pod] != epoch or self.pods.state[pod] != QUEUED:
            return
        self.drain_queue(s, now)
        if self.pods.state[pod] == QUEUED:
            self.provisioner.provision(s, now, pod)

    def retry_queue(self, s: int, now: int) -> None:
        if self.queues.pending_gpus[s] <= 0:
            return
        self.drain_queue(s, now)
        # launch for the head of the queue while demand exceeds capacity on its way
        for prio in (3, 2, 1, 0):
            for pod in list(islice(self.queues.queue[s][prio], BACKFILL_SCAN)):  # the head, not a copy of the queue
                if self.pods.state[pod] == QUEUED and not self.provisioner.provision(s, now, pod):
                    break
