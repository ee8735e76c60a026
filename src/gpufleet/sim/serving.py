"""Serving fleets in the simulated world: traffic, a request queue per fleet, and replicas driven by the autoscaler.

Each control tick serves the period that just ended through the fleet's queue (sim/queueing.py, batched or one
request per replica, from the serving spec): the request rate of the period against the ready replicas of each
part of it (replicas become ready after their cold start, stop when removed or lost). SLO attainment counts
the requests whose queue wait stayed within the spec's ``slo_s``. The replica autoscaler then decides through the
loop's port (``decide``) with what the queue measured as :class:`~gpufleet.ports.ReplicaSignals`: arrivals,
queue depth, requests in flight, SLO misses. The fleet's SLO and queue kind are declared to the loop when it is
built (sim/run.py), not observed.

A mixin of :class:`~gpufleet.sim.world.World`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaSignals
from gpufleet.sim.kinds import PRIO_SERVING, QUEUED, REMOVED, RUNNING
from gpufleet.sim.queueing import PeriodQueue, PeriodServed
from gpufleet.sim.scenario import ServingSpec

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.control.scheduling import FleetScheduler, PodAsk, QuotaAdmission
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.metrics import Metrics


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


class ServingMixin:
    """Mixin: the world's serving fleets. Declares the parts of the world it uses."""

    if TYPE_CHECKING:
        loop: ControlLoop
        metrics: Metrics
        decisions: DecisionLog
        sku_ids: list[str]
        period_s: int
        fleets: list[FleetRuntime]
        pending_gpus: list[int]
        p_arrival: list[int]
        p_ckpt: list[int]
        p_epoch: list[int]
        p_first_start: list[int]
        p_gpus: list[int]
        p_group: list[str]
        p_nodes: list[tuple[int, ...]]
        p_prio: list[int]
        p_ready: list[bool]
        p_remaining: list[int]
        p_seg: list[int]
        p_serving: list[int]
        p_sku: list[int]
        p_start: list[int]
        p_state: list[int]
        p_team: list[str]
        p_work: list[int]

        sched: FleetScheduler
        admission: QuotaAdmission

        def _ask(self, pod: int) -> PodAsk: ...
        def _set_state(self, pod: int, target: int) -> None: ...
        def _start(self, pod: int, now: int) -> None: ...
        def _release(self, pod: int, now: int, *, drain: bool = True) -> None: ...

    def _serve_period(self, i: int, fr: FleetRuntime, k: int, now: int) -> None:
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
                self._add_replica(i, fr, now)
        elif want < cur:
            fr.last_scale_down_s = now
            for _ in range(cur - want):
                self._remove_replica(fr, now)
        self.metrics.serving(i, now, rps, len(fr.pods), fr.ready)

    def _add_replica(self, i: int, fr: FleetRuntime, now: int) -> None:
        pod = len(self.p_state)
        self.p_gpus.append(fr.spec.gpus_per_replica)
        self.p_sku.append(fr.sku_idx)
        self.p_prio.append(PRIO_SERVING)
        self.p_ckpt.append(0)
        self.p_remaining.append(0)
        self.p_work.append(0)
        self.p_arrival.append(now)
        self.p_team.append(fr.spec.team)
        self.p_group.append(f"serving/{fr.spec.name}")
        self.p_serving.append(i)
        self.p_state.append(0)
        self.p_epoch.append(0)
        self.p_start.append(now)
        self.p_seg.append(now)
        self.p_first_start.append(-1)
        self.p_nodes.append(())
        self.p_ready.append(False)
        fr.pods.append(pod)
        self.sched.observe(self._ask(pod))
        self._start(pod, now)

    def _remove_replica(self, fr: FleetRuntime, now: int) -> None:
        # drop a replica that is not serving yet if there is one, else the newest
        victim = fr.pods[-1]
        if fr.ready < len(fr.pods):  # some replica is still starting: drop the newest such
            victim = next(p for p in reversed(fr.pods) if not self.p_ready[p])
        if fr.pods[-1] == victim:
            fr.pods.pop()  # the usual victim, the newest: no scan of the whole fleet
        else:
            fr.pods.remove(victim)
        if self.p_state[victim] == RUNNING:
            if self.p_ready[victim]:
                fr.ready_change(now, -1)
                self.p_ready[victim] = False
            self._release(victim, now)
        elif self.p_state[victim] == QUEUED:
            self.pending_gpus[self.p_sku[victim]] -= self.p_gpus[victim]
        self.admission.release(victim)  # a queued replica may hold quota; a parked one holds none
        self._set_state(victim, REMOVED)
