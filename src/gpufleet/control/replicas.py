"""Replica-count decisions for observed Deployments, through the one replica-policy port.

:func:`gpufleet_replica_policy` builds gpufleet's policy (the one the simulator's loop runs);
:class:`ReplicaScaler` holds one per serving Deployment of a world observed every period (the Kubernetes
controller) and returns a :class:`ScalePlan`.
:func:`decide_scale` asks a :class:`~gpufleet.ports.ReplicaAutoscaler` (the same interface the simulator
uses) for the desired count and returns a :class:`ScaleDecision` with its reason code. Scale to zero is
guarded twice: the policy honours ``min_replicas`` and this function never returns 0 unless
``scaling.min_replicas == 0`` (reason ``min_replicas_floor`` when it had to lift a decision).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.control.observation import DeclaredServing, ObservedDeployment
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.catalog import sku_for
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import PriceCatalog, ReplicaAutoscaler, ReplicaSignals


def gpufleet_replica_policy(period_s: float) -> SpareReplicas:
    """gpufleet's replica policy, decided every ``period_s``: the predictive autoscaler (one per fleet) under the
    spare replicas, the step pre-warm and the noise floor (control/serving_headroom.py). The one object every world
    runs: the simulator's gpufleet loop, the service's autoscaling decision and the Kubernetes controller."""
    return SpareReplicas(PredictiveReplicas(period_s), period_s)


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    namespace: str
    name: str
    current: int
    desired: int
    reason: str

    @property
    def changed(self) -> bool:
        return self.desired != self.current


def decide_scale(
    dep: ObservedDeployment,
    policy: ReplicaAutoscaler,
    *,
    observed_rps: float,
    scaling: ServingScaling,
    now_s: int,
    last_scale_down_s: int,
) -> ScaleDecision:
    want, reason = policy.desired(
        current=dep.replicas,
        observed_rps=observed_rps,
        scaling=scaling,
        now_s=now_s,
        last_scale_down_s=last_scale_down_s,
    )
    return _bounded(dep, want, reason, scaling)


def _count(v: float | None) -> int:
    """A gauge of requests as a whole count (unobserved or not a finite count >= 0: none)."""
    return round(v) if v is not None and math.isfinite(v) and v >= 0 else 0


def _misses(v: float | None) -> float | None:
    """A count of SLO misses over a period (unobserved or not a finite count >= 0: not measured)."""
    return float(v) if v is not None and math.isfinite(v) and v >= 0 else None


def _bounded(dep: ObservedDeployment, want: int, reason: str, scaling: ServingScaling) -> ScaleDecision:
    floor = max(0, scaling.min_replicas)
    if want < floor:
        want, reason = floor, "min_replicas_floor"
    return ScaleDecision(dep.namespace, dep.name, dep.replicas, min(want, scaling.max_replicas), reason)


Key = tuple[str, str]  # (namespace, name) of a Deployment


@dataclass(frozen=True, slots=True)
class ServingGauges:
    """What a world measured of its serving Deployments besides their request rate, per :data:`Key`: requests
    waiting and requests in service now, and requests whose queue wait passed the SLO over the last period. A
    Deployment absent from a map was not observed there (no queue / not measured), never a guess."""

    queued: Mapping[Key, float] = field(default_factory=dict)
    running: Mapping[Key, float] = field(default_factory=dict)
    slo_misses: Mapping[Key, float] = field(default_factory=dict)


NO_GAUGES = ServingGauges()


@dataclass(frozen=True, slots=True)
class ScalePlan:
    """One period's replica decisions, and the Deployments left alone with a reason code (``no_rate``: the world
    could not observe its request rate; nothing is scaled on missing data)."""

    decisions: tuple[ScaleDecision, ...]
    skipped: tuple[tuple[str, str, str], ...]  # (namespace, name, reason)


class ReplicaScaler:
    """gpufleet's replica policy over the serving Deployments of a world observed every ``period_s`` (the
    Kubernetes controller): one :func:`gpufleet_replica_policy` per Deployment, kept across periods (its forecaster,
    floors and noise history learn from every observation, as in the simulator), declared from what the
    Deployment declares (:class:`DeclaredServing`; a changed declaration starts a fresh policy). A replica's price
    is the catalog's on-demand price of its GPU product times its GPUs (unknown product: no noise floor)."""

    def __init__(self, period_s: float, catalog: PriceCatalog, sku_map: Mapping[str, str] | None = None) -> None:
        if period_s <= 0:
            raise ValidationError("period_s", f"must be > 0, got {period_s}")
        self.period_s = float(period_s)
        self.catalog = catalog
        self.sku_map = dict(sku_map or {})
        self._policies: dict[Key, tuple[DeclaredServing, SpareReplicas]] = {}
        self._decided_s: dict[Key, float] = {}  # when each policy last decided a period

    def price_usd_per_replica_h(self, d: DeclaredServing) -> float | None:
        if not d.gpu_product or d.gpus_per_replica <= 0:
            return None
        sku = sku_for(d.gpu_product, self.catalog.sku_ids(), self.sku_map)
        lp = self.catalog.list_price(sku) if sku is not None else None
        return float(lp.on_demand) * d.gpus_per_replica if lp is not None else None

    def _policy(self, dep: ObservedDeployment, d: DeclaredServing) -> SpareReplicas:
        key = (dep.namespace, dep.name)
        held = self._policies.get(key)
        if held is not None and held[0] == d:
            return held[1]
        policy = gpufleet_replica_policy(self.period_s)
        policy.declare_fleet(
            d.scaling,
            gpus_per_replica=max(d.gpus_per_replica, 1),
            slo_s=d.slo_s,
            max_concurrency=d.max_concurrency,
            price_usd_per_replica_h=self.price_usd_per_replica_h(d),
        )
        self._policies[key] = (d, policy)
        self._decided_s.pop(key, None)  # a fresh policy reacts only once it has decided a period
        return policy

    def knows(self, dep: ObservedDeployment) -> bool:
        """True when ``dep`` has a running policy for its current declaration."""
        held = self._policies.get((dep.namespace, dep.name))
        return held is not None and held[0] == dep.serving

    def warm(
        self,
        dep: ObservedDeployment,
        history: Sequence[tuple[float, float]],
        queued: Mapping[float, float] | None = None,
        running: Mapping[float, float] | None = None,
        slo_misses: Mapping[float, float] | None = None,
    ) -> int:
        """Start ``dep``'s policy from its request-rate history, ``(time, rps)`` points one period apart (a new
        leader, or a Deployment seen for the first time): each point is decided as a period and the decision
        dropped, so the forecaster, floors and windows hold what they would had this world been decided all along
        (as the simulator's policy has). ``queued``, ``running`` and ``slo_misses`` map the same times to those
        signals (absent: as in :meth:`plan`). Its replicas are taken as they are now. Returns the periods replayed
        (0: the policy already runs, or ``dep`` declares no serving); points that are not a rate >= 0 are skipped."""
        d = dep.serving
        if d is None or self.knows(dep):
            return 0
        policy = self._policy(dep, d)
        n = 0
        for t, rps in sorted(history):
            if math.isfinite(t) and math.isfinite(rps) and rps >= 0:
                waiting, busy = _count((queued or {}).get(t)), _count((running or {}).get(t))
                misses = _misses((slo_misses or {}).get(t))
                policy.decide(self._signals(dep, d, t, rps, waiting, busy, misses), d.scaling)
                n += 1
        return n

    def react(
        self, deployments: Sequence[ObservedDeployment], rates: Mapping[Key, float], now_s: float,
        gauges: ServingGauges = NO_GAUGES,
    ) -> ScalePlan:  # fmt: skip
        """The fast path between two periods (the simulator's, when its gateway sees the queue grow): each
        Deployment whose policy runs is asked ``react`` on what was observed since its last period; scale-up only
        (``queue_growth``), within ``max_replicas``. A Deployment without a rate, or whose policy has not decided a
        period yet, is left to the next period. Changes no policy state: the floors and forecasts learn only from
        :meth:`plan`."""
        decisions: list[ScaleDecision] = []
        for dep in deployments:
            key = (dep.namespace, dep.name)
            d = dep.serving
            rps = rates.get(key)
            since = now_s - self._decided_s.get(key, math.inf)
            if d is None or not self.knows(dep) or rps is None or not math.isfinite(rps) or rps < 0 or since <= 0:
                continue
            waiting, busy = _count(gauges.queued.get(key)), _count(gauges.running.get(key))
            signals = self._signals(dep, d, now_s, rps, waiting, busy, None, period_s=since)
            got = self._policies[key][1].react(signals, d.scaling)
            if got is not None and got.desired > dep.replicas:
                decisions.append(_bounded(dep, got.desired, got.reason, d.scaling))
        return ScalePlan(tuple(decisions), ())

    def _signals(
        self, dep: ObservedDeployment, d: DeclaredServing, now_s: float, rps: float, waiting: int, running: int,
        misses: float | None, period_s: float | None = None,
    ) -> ReplicaSignals:  # fmt: skip
        ready = min(dep.ready_replicas, dep.replicas)
        return ReplicaSignals(
            now_s=float(now_s),
            ready=ready,
            starting=max(dep.replicas - ready, 0),
            period_s=self.period_s if period_s is None else period_s,
            arrival_rps=rps,
            concurrency=float(waiting + running),
            queue_depth=waiting,
            load_replicas=rps / d.scaling.target_rps_per_replica,
            slo_misses=misses,
        )

    def plan(
        self, deployments: Sequence[ObservedDeployment], rates: Mapping[Key, float], now_s: float,
        gauges: ServingGauges = NO_GAUGES,
    ) -> ScalePlan:  # fmt: skip
        """Decide every Deployment that declares serving; ``rates`` maps (namespace, name) to its request rate
        over the last period (absent: not observed). ``gauges``: a queue or in-flight count not observed is taken
        as none (the queue-drain rule and the in-flight burst requirement of one-request replicas see nothing
        rather than a guess); SLO misses not measured leave the static floor's error budget unread."""
        decisions: list[ScaleDecision] = []
        skipped: list[tuple[str, str, str]] = []
        seen: set[tuple[str, str]] = set()
        for dep in deployments:
            d = dep.serving
            if d is None:
                continue
            key = (dep.namespace, dep.name)
            seen.add(key)
            rps = rates.get(key)
            if rps is None or not math.isfinite(rps) or rps < 0:
                skipped.append((dep.namespace, dep.name, "no_rate"))
                continue
            waiting, busy = _count(gauges.queued.get(key)), _count(gauges.running.get(key))
            signals = self._signals(dep, d, now_s, rps, waiting, busy, _misses(gauges.slo_misses.get(key)))
            got = self._policy(dep, d).decide(signals, d.scaling)
            self._decided_s[key] = float(now_s)
            decisions.append(_bounded(dep, got.desired, got.reason, d.scaling))
        for gone in set(self._policies) - seen:  # deleted, or no longer opted in
            del self._policies[gone]
            self._decided_s.pop(gone, None)
        return ScalePlan(tuple(decisions), tuple(skipped))
