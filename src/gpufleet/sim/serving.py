"""Serving fleets in the simulated world: traffic, a request queue per fleet, and replicas driven by the autoscaler.

Each control tick serves the period that just ended through the fleet's queue (sim/queueing.py, batched or one
request per replica, from the serving spec): the request rate of the period against the ready replicas of each
part of it (replicas become ready after their cold start, stop when removed or lost). SLO attainment counts
the requests whose queue wait stayed within the spec's ``slo_s``. The replica autoscaler then decides through the
loop's port (``decide``) with what the queue measured as :class:`~gpufleet.ports.ReplicaSignals`: arrivals,
queue depth, requests in flight, SLO misses. The fleet's SLO and queue kind are declared to the loop when it is
built (sim/run.py), not observed.

A part of :class:`~gpufleet.sim.world.World` (:class:`ServingFleets`); replicas are pods of the shared pod table,
placed and released by the scheduling part like any other pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaSignals
from gpufleet.sim import demand
from gpufleet.sim.kinds import QUEUED, REMOVED, RUNNING
from gpufleet.sim.queueing import PeriodQueue, PeriodServed
from gpufleet.sim.scenario import ServingSpec

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.sim.decisions import DecisionLog
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
    cold_starts: int = 0
    ready_at_tick: int = 0  # ready replicas at the last control tick
    ready_log: list[tuple[int, int]] = field(default_factory=list)  # (time, ready after the change) since then

    def ready_change(self, now: int, delta: int) -> None:
        """A replica became ready (+1) or stopped serving (-1)."""
        self.ready += delta
        self.ready_log.append((now, self.ready))

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


class ServingFleets:
    """Serves each fleet's traffic through its queue every control tick and applies the replica autoscaler's
    decision: adds replicas (new pods, started by the scheduling part) or removes them."""

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
        cur = len(fr.pods)
        if k > 0:
            rps = float(fr.rps[k - 1])
            served = fr.queue.serve(rps, fr.segments(now - period, now))
            fr.total_req += served.requests
            fr.served_req += served.requests - served.missed
        else:  # nothing served yet: the rate known from before the horizon, an empty queue
            rps = float(fr.rps[0])
            fr.segments(now, now)  # start the ready log at this tick
            served = PeriodServed(0.0, 0.0, 0, 0.0, 0.0, rps * fr.queue.work_s)
        exclusive = fr.spec.queue == "exclusive"
        signals = ReplicaSignals(
            now_s=float(now),
            ready=fr.ready,
            starting=cur - fr.ready,
            period_s=float(period),
            arrival_rps=rps,
            concurrency=served.concurrency,
            queue_depth=served.queue_depth,
            load_replicas=served.load_replicas,
            peak_concurrency=served.peak_concurrency if exclusive else None,
            slo_misses=served.missed,
        )
        decision = self.loop.autoscaler.decide(signals, fr.scaling)
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
            for _ in range(cur - want):
                self.remove_replica(fr, now)
        self.metrics.serving(i, now, rps, len(fr.pods), fr.ready)

    def add_replica(self, i: int, fr: FleetRuntime, now: int) -> None:
        pod = self.pods.add_replica(i, fr.spec, fr.sku_idx, now)
        fr.pods.append(pod)
        self.scheduling.sched.observe(self.scheduling.ask(pod))
        self.scheduling.start(pod, now)

    def remove_replica(self, fr: FleetRuntime, now: int) -> None:
        # drop a replica that is not serving yet if there is one, else the newest
        victim = fr.pods[-1]
        if fr.ready < len(fr.pods):  # some replica is still starting: drop the newest such
            victim = next(p for p in reversed(fr.pods) if not self.pods.ready[p])
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

    def on_ready(self, now: int, pod: int, epoch: int) -> None:
        if self.pods.epoch[pod] != epoch or self.pods.state[pod] != RUNNING:
            return
        fr = self.fleets[self.pods.serving[pod]]
        fr.ready_change(now, 1)
        fr.cold_starts += 1
        self.pods.ready[pod] = True
