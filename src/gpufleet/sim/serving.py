"""Serving fleets in the simulated world: traffic, a request queue per fleet, and replicas driven by the autoscaler.

Each control tick serves the period that just ended through the fleet's queue (sim/queueing.py, batched or one
request per replica, from the serving spec): the request rate of the period against the ready replicas of each
part of it (replicas become ready after their cold start, stop when removed or lost). SLO attainment counts
the requests whose queue wait stayed within the spec's ``slo_s``. The replica autoscaler then decides through the
loop's port (``decide``) with what the queue measured as :class:`~gpufleet.ports.ReplicaSignals`: arrivals,
queue depth, requests in flight, SLO misses. The fleet's SLO and queue kind are declared to the loop when it is
built (sim/run.py), not observed. A loop with a gateway queue limit (``ControlLoop.queue_limit_slo``) has each
fleet's queue shed the requests that would wait past it (sim/queueing.py, "Admission control"): they count as
misses, and the arrivals and load the autoscaler sees still include them.

Between two ticks the world watches each fleet's queue: when arriving work exceeds the ready replicas (the queue
grows: at a period start whose rate is above the ready fleet, or when a replica stops serving - a node failure,
a reclaim), it schedules a **queue-growth observation** ``METRICS_DELAY_S`` later (one pending per fleet, none
past the next tick). The observation serves the elapsed part of the period through the queue and calls the
replica policy's fast path (the port's ``react``) with what that window showed; a decision is applied as at a
tick. The tick then serves the rest of the period and ``decide`` sees the whole period (the parts combined,
:func:`~gpufleet.sim.queueing.combine`). A policy that reacted and whose fleet, once every replica is up, still
cannot carry the arrivals is observed again after another delay; one that declined is asked again at the next
growth (tick or lost replica). Observations happen only while a queue grows, so a well-sized fleet costs none.

The world also observes, for the policy, whether a pool of the fleet's SKU is out of stock
(``ReplicaSignals.stocked_out``), and for the run summary, why requests missed: each served window's misses go to
one cause of :data:`MISS_CAUSES` (:meth:`ServingFleets.account_misses`; observation only, no decision reads it).

A part of :class:`~gpufleet.sim.world.World` (:class:`ServingFleets`); replicas are pods of the shared pod table,
placed and released by the scheduling part like any other pod.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.control.replica_victims import ReplicaView, dearest_first_keys
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals
from gpufleet.sim import demand
from gpufleet.sim.kinds import OBSERVE, QUEUED, REMOVED, RUNNING
from gpufleet.sim.queueing import PeriodQueue, PeriodServed, combine
from gpufleet.sim.scenario import ServingSpec

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import PoolRuntime
    from gpufleet.sim.metrics import Metrics
    from gpufleet.sim.pods import PodTable, WorkQueues
    from gpufleet.sim.scheduling import Scheduling


@dataclass(slots=True)
class FleetRuntime:
    spec: ServingSpec
    scaling: ServingScaling
    sku_idx: int
    rps: np.ndarray
    queue: PeriodQueue
    pods: list[int] = field(default_factory=list)  # active replica pods, oldest first
    ready: int = 0
    last_scale_down_s: int = -(10**12)
    served_req: float = 0.0  # requests that waited at most the SLO
    total_req: float = 0.0
    shed_req: float = 0.0  # requests the gateway rejected at arrival (admission control; counted as missed)
    cold_starts: int = 0
    # missed requests by cause (:meth:`ServingFleets.account_misses`, :data:`MISS_CAUSES`): observation only
    misses_by_cause: dict[str, float] = field(default_factory=dict)
    last_loss_s: int = -(10**12)  # the last time a ready replica stopped serving other than by a scale-down
    ready_at_tick: int = 0  # ready replicas when the queue was last served (a tick or an observation)
    ready_log: list[tuple[int, int]] = field(default_factory=list)  # (time, ready after the change) since then
    served_to: int = 0  # the queue has served the traffic up to this time
    parts: list[PeriodServed] = field(default_factory=list)  # the current period's parts served before an observation
    observe_at: int = -1  # the pending queue-growth observation (-1: none)
    index: int = -1  # the fleet's index in the world (the observation event's argument)
    sku_pools: list[PoolRuntime] = field(default_factory=list)  # the pools of the fleet's SKU (their stock is observed)
    # called when a replica stops serving (``ServingFleets.watch``: is the queue growing now?)
    on_drop: Callable[[FleetRuntime, int], None] | None = None

    def ready_change(self, now: int, delta: int) -> None:
        """A replica became ready (+1) or stopped serving (-1)."""
        self.ready += delta
        self.ready_log.append((now, self.ready))
        if delta < 0 and now != self.last_scale_down_s:  # not the autoscaler's own scale-down: a lost replica
            self.last_loss_s = now
        if delta < 0 and self.on_drop is not None:
            self.on_drop(self, now)

    def serve_to(self, rate_rps: float, now: int) -> PeriodServed:
        """Serve the traffic from ``served_to`` to ``now`` at ``rate_rps`` through the queue; count the requests."""
        got = self.queue.serve(rate_rps, self.segments(self.served_to, now))
        self.served_to = now
        self.total_req += got.requests
        self.served_req += got.requests - got.missed
        self.shed_req += got.shed
        return got

    def segments(self, start: int, end: int) -> list[tuple[float, int]]:
        """(duration s, ready replicas) of ``[start, end)`` from the changes logged since the last tick."""
        out: list[tuple[float, int]] = []
        t, r = start, self.ready_at_tick
        for at, ready in self.ready_log:
            if at > t:
                out.append((float(at - t), r))
                t = at
            r = ready
        out.append((float(end - t), r))
        self.ready_log.clear()
        self.ready_at_tick = self.ready
        return out


def build_fleets(
    specs: list[ServingSpec], sku_ids: list[str], horizon_s: int, period_s: int, rng: np.random.Generator
) -> list[FleetRuntime]:
    """Each serving fleet with its request rate per control period over the horizon (drawn from ``rng``)."""
    ticks = np.arange(0, horizon_s + period_s, period_s)
    fleets: list[FleetRuntime] = []
    for spec in specs:
        scaling = ServingScaling(
            spec.min_replicas,
            spec.max_replicas,
            spec.target_rps_per_replica,
            spec.cold_start_s,
            spec.scale_down_delay_s,
        )
        rps = demand.serving_rps(spec, ticks, rng)
        queue = PeriodQueue(spec.queue, 1.0 / spec.target_rps_per_replica, spec.slo_s)
        fleets.append(FleetRuntime(spec, scaling, sku_ids.index(spec.sku), rps, queue))
    return fleets


# Time from a queue starting to grow to the replica policy acting on it (the fast path, module docstring): a
# Prometheus scrape (30 s, kube-prometheus-stack's interval) plus an HPA sync (15 s, the controller's default
# --horizontal-pod-autoscaler-sync-period); KEDA's default 30 s polling plus a 15 s scrape gives the same.
# Fixed, not tuned (docs/scenario.md, "Serving physics").
METRICS_DELAY_S = 45


class ServingFleets:
    """Serves each fleet's traffic through its queue every control tick and applies the replica autoscaler's
    decision: adds replicas (new pods, started by the scheduling part) or removes them. Between ticks, a queue
    seen growing calls the policy's fast path (module docstring); ``metrics_delay_s`` None turns that off."""

    def __init__(
        self,
        *,
        fleets: list[FleetRuntime],
        pods: PodTable,
        queues: WorkQueues,
        scheduling: Scheduling,
        loop: ControlLoop,
        metrics: Metrics,
        decisions: DecisionLog,
        sku_ids: list[str],
        period_s: int,
        q: EventQueue | None = None,
        metrics_delay_s: int | None = METRICS_DELAY_S,
    ) -> None:
        self.fleets = fleets
        self.pods = pods
        self.queues = queues
        self.scheduling = scheduling
        self.loop = loop
        self.metrics = metrics
        self.decisions = decisions
        self.sku_ids = sku_ids
        self.period_s = period_s
        self.q = q
        self.metrics_delay_s = metrics_delay_s
        self.observations = 0  # queue-growth observations served
        self.reactions = 0  # of which the policy changed the fleet
        self.victim_reasons: dict[str, int] = {}  # the scale-down rule's choices by reason code
        for i, fr in enumerate(fleets):
            fr.index = i
            fr.sku_pools = [pr for pr in scheduling.fleet.pools if pr.sku_idx == fr.sku_idx]
            fr.on_drop = self.watch
            fr.queue.shed_wait_s = loop.queue_wait_limit_s(fr.spec.slo_s)  # the loop's admission control

    def on_tick(self, now: int) -> None:
        """Serve the period that just ended, fleet by fleet."""
        k = now // self.period_s
        for i, fr in enumerate(self.fleets):
            self.serve_period(i, fr, k, now)

    def serve_period(self, i: int, fr: FleetRuntime, k: int, now: int) -> None:
        """Serve the period that just ended through the fleet's queue, then ask the replica autoscaler (through
        the loop's port) with what the queue measured. At time 0 the fleet's traffic is known from before the
        horizon: the autoscaler sees the first period's rate and an empty queue."""
        period = self.period_s
        if k > 0:
            rps = float(fr.rps[k - 1])
            start = fr.served_to
            got = fr.serve_to(rps, now)
            if got.missed > 0:
                self.account_misses(fr, start, now, got.missed)
            fr.parts.append(got)
            served = combine(fr.parts)
            fr.parts.clear()
        else:  # nothing served yet: the rate known from before the horizon, an empty queue
            rps = float(fr.rps[0])
            fr.segments(now, now)  # start the ready log at this tick
            fr.served_to = now
            served = PeriodServed(0.0, 0.0, 0, 0.0, 0.0, rps * fr.queue.work_s)
        decision = self.loop.autoscaler.decide(_signals(fr, now, period, rps, served), fr.scaling)
        self.apply(i, fr, now, decision)
        self.metrics.serving(i, now, rps, len(fr.pods), fr.ready)
        self.watch(fr, now)

    def apply(self, i: int, fr: FleetRuntime, now: int, decision: ReplicaDecision) -> None:
        """Apply the policy's replica count: start new replica pods or remove replicas (logged with its reason)."""
        cur = len(fr.pods)
        want = decision.desired
        if want != cur:
            self.decisions.add(
                now,
                "autoscale",
                "replicas_up" if want > cur else "replicas_down",
                decision.reason,
                None,
                abs(want - cur) * fr.spec.gpus_per_replica,
                count=abs(want - cur),
                unit="replicas",
                sku=self.sku_ids[fr.sku_idx],
            )
        if want > cur:
            for _ in range(want - cur):
                self.add_replica(i, fr, now)
        elif want < cur:
            fr.last_scale_down_s = now
            # the loop's rule (control/replica_victims.py) ranks the fleet once for the batch; the cost-aware rule
            # from its keys written here (no view per replica: the same ranking, dearest_first_keys)
            rule = self.loop.replica_victims
            if rule.cost_aware:
                keys, not_ready = self.replica_keys(fr)
                choices = dearest_first_keys(keys, not_ready, cur - want)
            else:
                choices = rule.choose(self.replica_views(fr), cur - want)
            victims = [fr.pods[c.index] for c in choices]
            for c, victim in zip(choices, victims, strict=True):
                self.victim_reasons[c.reason] = self.victim_reasons.get(c.reason, 0) + 1
                self.stop_replica(fr, victim, now)

    def watch(self, fr: FleetRuntime, now: int) -> None:
        """Schedule a queue-growth observation ``metrics_delay_s`` from now if the fleet's queue grows now (arriving
        work above the ready replicas), none is pending, and it falls before the next tick."""
        delay = self.metrics_delay_s
        if delay is None or self.q is None or fr.observe_at >= 0:
            return
        k = now // self.period_s
        if k >= len(fr.rps) or float(fr.rps[k]) * fr.queue.work_s <= fr.ready:
            return
        at = now + delay
        if at >= (k + 1) * self.period_s:
            return
        fr.observe_at = at
        self.q.schedule(at, OBSERVE, fr.index, 0, priority=2)

    def on_observe(self, now: int, i: int, _b: int) -> None:
        """A queue-growth observation: serve the period so far, then ask the policy's fast path with that window."""
        fr = self.fleets[i]
        if fr.observe_at != now:
            return
        fr.observe_at = -1
        self.observations += 1
        start = fr.served_to
        rps = float(fr.rps[now // self.period_s])
        part = fr.serve_to(rps, now)
        if part.missed > 0:
            self.account_misses(fr, start, now, part.missed)
        fr.parts.append(part)
        cur = len(fr.pods)
        decision = self.loop.autoscaler.react(_signals(fr, now, now - start, rps, part), fr.scaling)
        if decision is None or decision.desired == cur:
            return
        self.reactions += 1
        self.apply(i, fr, now, decision)
        if part.load_replicas > len(fr.pods):  # the fleet, once up, still cannot carry the arrivals: look again
            self.watch(fr, now)

    def account_misses(self, fr: FleetRuntime, start: int, now: int, missed: float) -> None:
        """Attribute the requests missed over ``[start, now)`` to one cause (:data:`MISS_CAUSES`, first that holds):
        a replica of the fleet waited for a node in the window (``no_capacity``); a replica was lost within a
        cold start and a period before it (``replica_lost``); a replica was cold-starting in the window, added
        within two periods of a scale-down (``cold_start_after_scale_down``) or not (``cold_start``); every
        replica was up, the last decision scaled the fleet down (``all_up_after_scale_down``) or not (``all_up``).
        Observation only: nothing here feeds a decision."""
        p = self.pods
        cold = fr.spec.cold_start_s
        waited = starting = False
        added = -(10**12)
        for pod in fr.pods:
            st = p.state[pod]
            if st != RUNNING:  # queued or parked: no node for it
                waited = True
                break
            if not p.ready[pod] or p.start[pod] + cold > start:  # cold-starting in the window
                if p.start[pod] > p.arrival[pod]:  # it was placed after it was asked for: it waited for a node
                    waited = True
                    break
                starting = True
                added = max(added, p.arrival[pod])
        if waited:
            cause = "no_capacity"
        elif fr.last_loss_s > start - cold - self.period_s:
            cause = "replica_lost"
        elif starting:
            recent = 0 <= added - fr.last_scale_down_s <= 2 * self.period_s
            cause = "cold_start_after_scale_down" if recent else "cold_start"
        else:
            cause = "all_up_after_scale_down" if fr.last_scale_down_s >= start else "all_up"
        fr.misses_by_cause[cause] = fr.misses_by_cause.get(cause, 0.0) + missed

    def add_replica(self, i: int, fr: FleetRuntime, now: int) -> None:
        pod = self.pods.add_replica(i, fr.spec, fr.sku_idx, now)
        fr.pods.append(pod)
        self.scheduling.sched.observe(self.scheduling.ask(pod))
        self.scheduling.start(pod, now)

    def stop_replica(self, fr: FleetRuntime, victim: int, now: int) -> None:
        if fr.pods[-1] == victim:
            fr.pods.pop()  # the usual victim, the newest: no scan of the whole fleet
        else:
            fr.pods.remove(victim)
        if self.pods.state[victim] == RUNNING:
            if self.pods.ready[victim]:
                fr.ready_change(now, -1)
                self.pods.ready[victim] = False
            self.scheduling.release(victim, now)
        elif self.pods.state[victim] == QUEUED:
            self.queues.pending_gpus[self.pods.sku[victim]] -= self.pods.gpus[victim]
        self.scheduling.admission.release(victim)  # a queued replica may hold quota; a parked one holds none
        self.pods.set_state(victim, REMOVED)

    def replica_views(self, fr: FleetRuntime) -> list[ReplicaView]:
        """The fleet's replicas (oldest first) as the scale-down rule sees them: ready, node, its tier price per
        GPU-hour, held under a reservation, alone on its node(s)."""
        ready, pod_nodes = self.pods.ready, self.pods.nodes
        f = self.scheduling.fleet
        n_pool, n_res, n_pods = f.n_pool, f.n_res, f.n_pods
        price = [pr.price_usd for pr in f.pools]  # per pool
        views: list[ReplicaView] = []
        add = views.append
        new = tuple.__new__  # the named tuple, built without its Python-level __new__ frame (one per replica)
        for pod in fr.pods:
            nodes = pod_nodes[pod]
            if not nodes:  # queued or starting without a node
                add(_UNPLACED[ready[pod]])
                continue
            n = nodes[0]
            alone = len(n_pods[n]) == 1 and (len(nodes) == 1 or all(len(n_pods[m]) == 1 for m in nodes))
            add(new(ReplicaView, (ready[pod], n, price[n_pool[n]], n_res[n] >= 0, alone)))
        return views

    def replica_keys(self, fr: FleetRuntime) -> tuple[list[tuple[float, bool, int]], list[int]]:
        """What the cost-aware rule ranks, without the views: the rank key ``(saving per GPU-hour, alone, index)``
        of each ready replica and the indices of the others, oldest first (exactly ``_rank_keys`` of
        :meth:`replica_views`: a ready replica without a node saves 0.0 and is not alone)."""
        ready, pod_nodes = self.pods.ready, self.pods.nodes
        f = self.scheduling.fleet
        n_saving, n_pods = f.n_saving, f.n_pods
        keys: list[tuple[float, bool, int]] = []
        not_ready: list[int] = []
        add = keys.append
        for j, pod in enumerate(fr.pods):
            if not ready[pod]:
                not_ready.append(j)
                continue
            nodes = pod_nodes[pod]
            if not nodes:
                add((0.0, False, j))
                continue
            n = nodes[0]
            alone = len(n_pods[n]) == 1 and (len(nodes) == 1 or all(len(n_pods[m]) == 1 for m in nodes))
            add((n_saving[n], alone, j))
        return keys, not_ready

    def on_ready(self, now: int, pod: int, epoch: int) -> None:
        if self.pods.epoch[pod] != epoch or self.pods.state[pod] != RUNNING:
            return
        fr = self.fleets[self.pods.serving[pod]]
        fr.ready_change(now, 1)
        fr.cold_starts += 1
        self.pods.ready[pod] = True


_UNPLACED = (ReplicaView(False), ReplicaView(True))
# the causes :meth:`ServingFleets.account_misses` attributes missed requests to, in the order it tests them
MISS_CAUSES = (
    "no_capacity",
    "replica_lost",
    "cold_start_after_scale_down",
    "cold_start",
    "all_up_after_scale_down",
    "all_up",
)  # a replica without a node, by its readiness


def _signals(fr: FleetRuntime, now: int, window_s: int, rps: float, served: PeriodServed) -> ReplicaSignals:
    """What the fleet's queue showed over the last ``window_s`` (a control period, or the part of one before a
    queue-growth observation), as the replica port's signals."""
    return ReplicaSignals(
        now_s=float(now),
        ready=fr.ready,
        starting=len(fr.pods) - fr.ready,
        period_s=float(window_s),
        arrival_rps=rps,
        concurrency=served.concurrency,
        queue_depth=served.queue_depth,
        load_replicas=served.load_replicas,
        peak_concurrency=served.peak_concurrency if fr.spec.queue == "exclusive" else None,
        slo_misses=served.missed,
        stocked_out=any(not pr.in_stock for pr in fr.sku_pools),
    )
