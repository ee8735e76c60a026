"""Replica scaling of opted-in serving Deployments, as the controller runs it (leader only, off its binding loop).

Every ``scale_every_s`` the request rate of each opted-in Deployment is read from Prometheus and gpufleet's replica
policy (``control/replicas.py``: :class:`ReplicaScaler`, the simulator loop's policy) decides its replicas, applied
with gpufleet's record of the write on the Deployment (``Actuator.scale``); every ``react_every_s`` between two periods the queue's fast path may scale up. The
reads go to Prometheus (up to 10 s a query, several queries a Deployment), so the controller runs a round on a
:class:`SideWorker` of its own: a Prometheus that hangs costs scaling rounds, never binds. A round has one deadline
(``scale_round_s``; 0: its period, ``scale_every_s`` or ``react_every_s``): no read is started past it and none
waits beyond it, so a slow Prometheus costs a round at most that long, however many Deployments opted in; the
Deployments whose rate it did not read keep their replicas (nothing is scaled on no data), each recorded ``skipped``
with reason ``round_deadline``, and the round's record ``scale_round`` / ``round_deadline`` counts them. A round
that raises is recorded (audit ``scale``, outcome ``failed``) and the next one runs. Before a round acts it asks
:class:`~gpufleet.adapters.kubernetes.scale_guard.ScaleGuard` who else scales each Deployment (an HPA, a human, a
``gpufleet.io/managed: "false"``; decided by ``control/scale_ownership.py``): those are left alone and audited, and
no Deployment is taken to zero when nothing would see its first request after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.cadence import due
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.scale_guard import ScaleGuard
from gpufleet.adapters.kubernetes.side_worker import SideWorker
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.adapters.kubernetes.workloads import (
    ROUND_DEADLINE,
    apply_scale,
    deployment_gauges,
    deployment_rates,
    gauge_queries,
    order_replicas,
    read_own_writes,
    rps_query,
)
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, TelemetryUnavailable
from gpufleet.control.observation import ObservedDeployment, ObservedNode
from gpufleet.control.replica_victims import node_price_usd_h
from gpufleet.control.replicas import ReplicaScaler, ScaleDecision, ScalePlan
from gpufleet.control.scale_ownership import ScaleOwnership
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG

if TYPE_CHECKING:
    from gpufleet.adapters.kubernetes.controller_config import ControllerConfig


class DeploymentScaling:
    """The controller's replica scaling: its policy's state, the replicas it last wrote, and its worker."""

    def __init__(
        self,
        kube: Kube,
        cfg: ControllerConfig,
        act: Actuator,
        view: ClusterView,
        prom: PrometheusTelemetry,
        clock: Callable[[], float],
        term: Callable[[], int] = lambda: 0,
    ) -> None:
        self.kube = kube
        self._term = term  # the controller's Lease term (LeaderElector.term)
        self._term_at = term()
        self.cfg = cfg
        self.act = act
        self.view = view
        self._prom = prom
        self.clock = clock
        self.scaler = ReplicaScaler(cfg.scale_every_s, BUILTIN_PRICE_CATALOG)  # rebuilt in a new term (_fresh_term)
        self._next_scale = 0.0
        self._next_react = 0.0
        self._scaled: dict[tuple[str, str], int] = {}  # replicas last written here, until the view shows them
        # the default PromQL of each gauge (workloads.GAUGES); a Deployment's annotation overrides it
        self._gauges = {"queue": cfg.queue_query, "running": cfg.running_query, "slo_misses": cfg.slo_miss_query}
        self.last_react: ScalePlan | None = None
        self.last_scale: ScalePlan | None = None
        self.worker = SideWorker("scaling", self._failed)
        self.guard = ScaleGuard(kube, act.record, cfg.rps_query)

    def due(self) -> bool:
        """A period decision or the fast path is due (the controller then queues :meth:`round` on the worker)."""
        now = self.clock()
        every = self.cfg.react_every_s
        return due(now, self._next_scale, self.cfg.scale_every_s) or (every > 0 and due(now, self._next_react, every))

    def round(self) -> None:
        """On the scaling worker: the period's decision when due, else the fast path's."""
        self.maybe_scale()
        self.maybe_react()

    def _failed(self, kind: str, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"[:500]
        if self.worker.stopping:  # the controller shut down under the round (its Prometheus client closed): no fault
            self.act.record(kind, "deployments", "scaling_round_cut_at_shutdown", "cancelled", error=error)
        else:
            self.act.record(kind, "deployments", "scaling_round_failed", "failed", error=error)

    def maybe_scale(self) -> ScalePlan | None:
        """Every ``scale_every_s``: read each opted-in Deployment's request rate, ask the replica policy
        (control/replicas.py :class:`ReplicaScaler`, the simulator loop's policy) and patch the Deployment's replicas
        (dry run: recorded only). Before a scale-down the Deployment's pods get their
        ``controller.kubernetes.io/pod-deletion-cost`` in gpufleet's scale-down order (``cost_aware_scale_down``).
        A Deployment whose rate could not be read is left alone and recorded as ``skipped``
        (``telemetry_unavailable`` or ``no_rate``): nothing is scaled on missing data. The requests waiting and
        in service (``queue_query``, ``running_query``) and the SLO misses (``slo_miss_query``) are read for the
        Deployments with a rate; one that cannot be read counts as no queue / not measured. A Deployment this
        controller scaled last period and the view still shows at other replicas is read again from the API
        server (``read_own_writes``): the policy never decides from the fleet before its own write."""
        now = self.clock()
        if not due(now, self._next_scale, self.cfg.scale_every_s):
            return None
        self._next_scale = now + self.cfg.scale_every_s
        self._fresh_term()
        deadline = self._deadline(self.cfg.scale_every_s)
        obs = self.view.observation()
        self.guard.read_hpas()
        deployments = self.guard.owned_elsewhere(read_own_writes(self.kube, obs.deployments, self._scaled))
        held = self.guard.held(deployments, now, period=True)
        by_key = {(d.namespace, d.name): d for d in deployments}
        rates, errors = deployment_rates(self._prom, deployments, now, self.cfg.rps_query, deadline)
        rated = [d for d in deployments if (d.namespace, d.name) in rates]
        self._warm(rated, now, deadline)
        gauges = deployment_gauges(self._prom, rated, now, self._gauges, deadline)
        plan = self.scaler.plan(deployments, rates, now, gauges)
        wakes: list[ScaleDecision] = []
        for ns, name, reason in plan.skipped:
            why = errors.get((ns, name))
            empty = reason == "no_rate" and not why and (ns, name) not in rates  # answered: no series
            if empty and (ns, name) not in held and (wake := self.guard.silent_at_zero(by_key[(ns, name)])):
                wakes.append(wake)  # at zero, its query answered nothing: unknown, not idle (scale_guard.py)
                continue
            if why == ROUND_DEADLINE:
                self.act.record("scale", f"{ns}/{name}", ROUND_DEADLINE, "skipped")
                continue
            self.act.record("scale", f"{ns}/{name}", "telemetry_unavailable" if why else reason, "skipped",
                            **({"error": why} if why else {}))  # fmt: skip
        self._report_cut("scale", errors)
        for d in wakes:
            self._apply(d)
        for d in plan.decisions:
            if (d.namespace, d.name) in held:  # someone else's replicas stand (audited by the guard)
                continue
            d = self.guard.woken(d, by_key.get((d.namespace, d.name)))
            if self.cfg.cost_aware_scale_down and d.desired < d.current:
                order_replicas(self.act, obs, d.namespace, d.name, self._node_price)
            self._apply(d, by_key.get((d.namespace, d.name)))
        self.last_scale = plan
        return plan

    def maybe_react(self) -> ScalePlan | None:
        """Every ``react_every_s`` between two scale periods: the rate and the queue of each Deployment whose policy
        runs, and the policy's fast path (``ReplicaScaler.react``: scale-up only, reason ``queue_growth``), applied
        as the period's decisions are. None when it is not due (or a period decision is)."""
        if self.cfg.react_every_s <= 0:
            return None
        now = self.clock()
        if not due(now, self._next_react, self.cfg.react_every_s) or due(now, self._next_scale, self.cfg.scale_every_s):
            return None
        self._next_react = now + self.cfg.react_every_s
        self._fresh_term()
        deadline = self._deadline(self.cfg.react_every_s)
        deployments = self.guard.owned_elsewhere(
            read_own_writes(self.kube, self.view.observation().deployments, self._scaled), audit=False
        )
        held = self.guard.held(deployments, now, period=False)
        running = [d for d in deployments if self.scaler.knows(d) and (d.namespace, d.name) not in held]
        rates, errors = deployment_rates(self._prom, running, now, self.cfg.rps_query, deadline)
        rated = [d for d in running if (d.namespace, d.name) in rates]
        g = deployment_gauges(self._prom, rated, now, {**self._gauges, "slo_misses": ""}, deadline)  # no misses
        self._report_cut("react", errors)
        plan = self.scaler.react(rated, rates, now, g)
        for d in plan.decisions:
            self._apply(d)
        self.last_react = plan
        return plan

    def _fresh_term(self) -> None:
        """In a new Lease term (the controller lost the Lease and took it back; another leader may have scaled
        meanwhile) the memory of the earlier term is dropped, as a new leader starts: the policies (each warmed again
        from its rate history, :meth:`_warm`), the replicas last written and the holds (``ScaleOwnership``: another
        leader's writes are gpufleet's, not someone else's: the new memory reads them from the record each write leaves
        on its Deployment, ``gpufleet.io/scaled-replicas``). Audited ``scale_round`` ``lead_regained``."""
        term = self._term()
        if term == self._term_at:
            return
        self._term_at = term
        self.scaler = ReplicaScaler(self.cfg.scale_every_s, BUILTIN_PRICE_CATALOG)
        self._scaled.clear()
        self.guard.ownership = ScaleOwnership()
        self.act.record("scale_round", "deployments", "lead_regained", "state_rebuilt", term=term)

    def _deadline(self, period_s: float) -> float:
        """The ``time.monotonic()`` instant the round's reads end by (``scale_round_s``, else its period)."""
        return time.monotonic() + (self.cfg.scale_round_s or period_s)

    def _report_cut(self, kind: str, errors: dict[tuple[str, str], str]) -> None:
        """One record for a round its deadline cut short: how many Deployments' rates it did not read."""
        cut = sorted(f"{ns}/{name}" for (ns, name), why in errors.items() if why == ROUND_DEADLINE)
        if cut:
            self.act.record("scale_round", kind, ROUND_DEADLINE, "cut", unread=len(cut), deployments=cut[:20])

    def _apply(self, d: ScaleDecision, dep: ObservedDeployment | None = None) -> None:
        """Write the replicas (and gpufleet's record of them on the Deployment; a decision that changes nothing
        brings ``dep``'s record up to its replicas: ``apply_scale``); a write applied is remembered until the view
        shows it (``read_own_writes``), and by the guard until someone else's change is seen."""
        got = apply_scale(self.act, d, dep.scaled_replicas if dep is not None else "unknown")
        if got in ("applied", "unchanged", "recorded"):
            self._scaled[(d.namespace, d.name)] = d.desired
            self.guard.ownership.wrote_replicas(d.namespace, d.name, d.desired)
        elif got == "conflict":  # someone else's replicas, found at the write: the next period holds them
            self.guard.ownership.wrote_replicas(d.namespace, d.name, d.current)

    def _warm(self, deployments: list[ObservedDeployment], now: float, deadline: float | None = None) -> None:
        """Replay the request-rate history (and the gauges' histories) of each Deployment whose policy this leader
        has not run yet (``scale_history_s`` of it, at the scale period; ``ReplicaScaler.warm``). Audited as
        ``scale_warm``; a rate history that cannot be read leaves the policy to start from nothing, as before."""
        step = max(1, round(self.cfg.scale_every_s))
        if self.cfg.scale_history_s < step:
            return
        start, end = int(now - self.cfg.scale_history_s), int(now) - step
        for dep in deployments:
            if dep.serving is None or self.scaler.knows(dep):
                continue
            target = f"{dep.namespace}/{dep.name}"
            try:
                history = self._prom.sum_range(rps_query(dep, self.cfg.rps_query), start, end, step, deadline=deadline)
            except TelemetryUnavailable as exc:
                self.act.record("scale_warm", target, "telemetry_unavailable", "skipped", error=str(exc))
                continue
            gauges: dict[str, dict[float, float] | None] = {}
            for name, query in gauge_queries(dep, self._gauges).items():
                try:  # a gauge's history that cannot be read is replayed as not observed
                    got = self._prom.sum_range(query, start, end, step, deadline=deadline) if query else None
                    gauges[name] = dict(got) if got is not None else None
                except TelemetryUnavailable:
                    gauges[name] = None
            n = self.scaler.warm(dep, history, gauges["queue"], gauges["running"], gauges["slo_misses"])
            read = sorted(k for k, v in gauges.items() if v is not None)
            self.act.record("scale_warm", target, "rate_history", "replayed", periods=n, gauges=read)

    @staticmethod
    def _node_price(node: ObservedNode) -> tuple[float, bool]:
        return node_price_usd_h(node, BUILTIN_PRICE_CATALOG)
