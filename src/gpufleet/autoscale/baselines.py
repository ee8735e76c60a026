"""Reference replica policies measured against gpufleet: static peak, Kubernetes HPA, Knative KPA.

Each follows its upstream defaults (cited in docs/autoscale.md); all share the bench's target utilization. They
implement the one replica-policy port (:class:`gpufleet.ports.ReplicaAutoscaler`): the min / max replicas are the
fleet's (``ServingScaling``). :class:`HpaPolicy` is also the baseline control loop's replica autoscaler
(``ControlLoop.baseline``): the one HPA of the code base.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals


class StaticPolicy(RatePolicy):
    """A fixed replica count (e.g. sized for the peak); no fast path (``RatePolicy.react``: no reaction)."""

    def __init__(self, replicas: int, name: str = "static_peak", period_s: float = 60.0) -> None:
        self.name = name
        self.period_s = period_s
        self.replicas = replicas

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision:
        return ReplicaDecision(self.replicas, "static")


class HpaPolicy(RatePolicy):
    """Kubernetes HorizontalPodAutoscaler (autoscaling/v2 defaults).

    15 s sync; desired = ceil(usage / target) where usage = sum of per-pod utilization over ready pods and
    pods still starting count as 0 usage (the HPA's conservative rule for unready pods on scale-up);
    10% tolerance; scale-up policy max(100%, 4 pods) per 15 s; scale-down stabilization 300 s (highest
    recommendation of the window) and at most 100% per 15 s. The utilization metric is the load the
    arrivals put on the ready replicas (not capped at 100%), a stronger signal than raw GPU utilization.
    min / max replicas are the fleet's (``scaling``; at least one: the HPA does not scale to zero).
    ``scale_down_stabilization_s`` None = the fleet's ``scaling.scale_down_delay_s`` (its
    ``behavior.scaleDown.stabilizationWindowSeconds``). Called less often than every ``period_s`` (the
    simulator's control period), the scale-up limit compounds over the sync periods that passed. Each fleet
    (``scaling``) keeps its own recommendation window, as each Deployment has its own HPA object.
    """

    name = "hpa"

    def __init__(
        self,
        *,
        target_utilization: float,
        period_s: float = 15.0,
        tolerance: float = 0.1,
        scale_down_stabilization_s: float | None = 300.0,
    ) -> None:
        self.period_s = period_s
        self.target = target_utilization
        self.tolerance = tolerance
        self.down_s = scale_down_stabilization_s
        # one state per fleet (``scaling``; None for a caller that runs one fleet without declaring it)
        self._recs: dict[ServingScaling | None, deque[tuple[float, int]]] = {}
        self._last_s: dict[ServingScaling | None, float] = {}

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision:
        s = signals
        lo, hi = (max(1, scaling.min_replicas), scaling.max_replicas) if scaling is not None else (1, 10_000)
        down_s = self.down_s if self.down_s is not None or scaling is None else float(scaling.scale_down_delay_s)
        last_s = self._last_s.get(scaling)
        syncs = 1 if last_s is None else max(1, round((s.now_s - last_s) / self.period_s))
        self._last_s[scaling] = s.now_s
        recs = self._recs.setdefault(scaling, deque())
        current = max(s.total, 1)
        usage = s.load_replicas if s.ready > 0 else 0.0
        ratio = usage / (self.target * current)
        if abs(ratio - 1.0) <= self.tolerance:
            rec, reason = current, "within_tolerance"
        else:
            rec, reason = math.ceil(usage / self.target - 1e-9), "utilization"
        if s.ready == 0 and s.total == 0:
            rec, reason = lo, "min_replicas"
        rec = min(hi, max(lo, rec))
        recs.append((s.now_s, rec))
        while recs and recs[0][0] < s.now_s - (down_s or 0.0) - 1e-9:
            recs.popleft()
        if rec < current:
            desired = min(current, max(r for _, r in recs))
            if desired != rec:
                reason = "scale_down_stabilized"
        elif rec > current:
            # the rate limit, but never below min_replicas (Kubernetes sets a fleet under its minimum to it at once)
            desired = max(_scale_up_limit(current, rec, syncs), lo)
        else:
            desired = rec
        return ReplicaDecision(desired, reason, forecast=usage)

    def react(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision | None:
        """The HPA's own syncs between two control periods (the port's fast path): the same formula on the short
        window the world observed (``signals.period_s``), scale-up only, without stabilization (Kubernetes'
        default ``behavior.scaleUp.stabilizationWindowSeconds`` is 0) and with the scale-up limit compounded over
        the syncs of that window. Scale-down waits for ``decide`` (its stabilization window). Keeps no state: the
        recommendation window and the last sync time are ``decide``'s; at the period's 900 s they only matter to a
        scale-down, which the fast path never makes. None when the rule asks for no more replicas."""
        s = signals
        hi = scaling.max_replicas if scaling is not None else 10_000
        current = max(s.total, 1)
        usage = s.load_replicas if s.ready > 0 else 0.0  # starting pods count as 0 usage on a scale-up
        if usage / (self.target * current) <= 1.0 + self.tolerance:
            return None
        rec = min(hi, math.ceil(usage / self.target - 1e-9))
        if rec <= s.total:
            return None
        syncs = max(1, round(s.period_s / self.period_s))
        return ReplicaDecision(_scale_up_limit(current, rec, syncs), "utilization_sync", forecast=usage)


def _scale_up_limit(current: int, rec: int, syncs: int) -> int:
    """The HPA's default scale-up policy, max(100%, 4 pods) per sync, compounded over ``syncs`` syncs."""
    limit = current
    for _ in range(min(syncs, 64)):
        limit = max(2 * limit, limit + 4)
        if limit >= rec:
            break
    return min(rec, limit)


class KpaPolicy(RatePolicy):
    """Knative Pod Autoscaler (defaults): rps metric, 2 s tick, 60 s stable and 6 s panic windows.

    desired = ceil(window average / target); panic when the panic-window desire reaches 200% of ready pods,
    and in panic never scale down; panic ends after a stable window without a panic trigger; max scale-down
    rate 2x per tick; scale to zero after 30 s grace once the stable window saw no traffic; requests that
    arrive at zero are held by the activator, which asks for one replica at once. ``metric="concurrency"``
    averages requests in flight instead of rps (Knative's own default metric; ``target_rps_per_replica`` is
    then the target in-flight requests per replica, e.g. 0.8 for a containerConcurrency of 1 at 80%).
    min / max replicas: the fleet's (``scaling``) when given, else these.
    """

    name = "kpa"

    def __init__(
        self,
        *,
        target_rps_per_replica: float,
        min_replicas: int = 0,
        max_replicas: int = 10_000,
        period_s: float = 2.0,
        stable_window_s: float = 60.0,
        panic_window_s: float = 6.0,
        panic_threshold: float = 2.0,
        scale_to_zero_grace_s: float = 30.0,
        max_scale_down_rate: float = 2.0,
        metric: Literal["rps", "concurrency"] = "rps",
    ) -> None:
        self.period_s = period_s
        self.metric = metric
        self.target = target_rps_per_replica
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.stable_s = stable_window_s
        self.panic_s = panic_window_s
        self.panic_threshold = panic_threshold
        self.grace_s = scale_to_zero_grace_s
        self.down_rate = max_scale_down_rate
        # one running-sum window per averaging window: (t, rps * duration, duration) entries
        self._win = {w: (deque[tuple[float, float, float]](), [0.0, 0.0]) for w in (stable_window_s, panic_window_s)}
        self._panic_since: float | None = None
        self._panic_last_trigger = -math.inf
        self._desired = 1
        self._zero_since: float | None = None

    def _push(self, now_s: float, rps: float, duration_s: float) -> None:
        for w, (q, sums) in self._win.items():
            q.append((now_s, rps * duration_s, duration_s))
            sums[0] += rps * duration_s
            sums[1] += duration_s
            while q and q[0][0] <= now_s - w + 1e-9:
                _, v, d = q.popleft()
                sums[0] -= v
                sums[1] -= d

    def _avg(self, window_s: float) -> float:
        _, (total, dur) = self._win[window_s]
        return max(0.0, total / dur) if dur > 1e-9 else 0.0

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision:
        s = signals
        now = s.now_s
        self._push(now, s.concurrency if self.metric == "concurrency" else s.arrival_rps, s.period_s)
        stable = self._avg(self.stable_s)
        panic = self._avg(self.panic_s)
        want_stable = math.ceil(stable / self.target - 1e-9)
        want_panic = math.ceil(panic / self.target - 1e-9)
        ready = max(s.ready, 1)
        if want_panic / ready >= self.panic_threshold:
            self._panic_last_trigger = now
            if self._panic_since is None:
                self._panic_since = now
        elif self._panic_since is not None and now - self._panic_last_trigger >= self.stable_s:
            self._panic_since = None
        if self._panic_since is not None:
            desired = max(want_panic, self._desired)
            reason = "panic"
        else:
            desired = want_stable
            reason = "stable"
            floor = math.floor(s.total / self.down_rate)
            if desired < floor:
                desired, reason = floor, "max_scale_down_rate"
        if desired == 0:
            if self._zero_since is None:
                self._zero_since = now
            if now - self._zero_since < self.grace_s:
                desired, reason = (1 if s.total > 0 else 0), "scale_to_zero_grace"
            else:
                reason = "scale_to_zero"
        else:
            self._zero_since = None
        if desired == 0 and (s.queue_depth > 0 or s.arrival_rps > 0):
            desired, reason = 1, "activator_held_requests"
        lo, hi = (scaling.min_replicas, scaling.max_replicas) if scaling is not None else (0, 10_000)
        desired = min(hi, max(lo, self.min_replicas, desired), self.max_replicas)
        self._desired = desired
        return ReplicaDecision(desired, reason, forecast=stable)

    def react(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision | None:
        """The KPA's own ticks between two control periods (the port's fast path), scale-up only: over a window of
        tens of seconds (``signals.period_s``) its 6 s panic window and most of its 60 s stable window see the
        window's load, so it asks for ``ceil(load / target)`` (reason ``panic`` when that is at least
        ``panic_threshold`` times the ready pods, else ``stable``). Keeps no state (the windows are ``decide``'s).
        None when that is no more than the pods it has."""
        s = signals
        value = s.concurrency if self.metric == "concurrency" else s.arrival_rps
        want = math.ceil(value / self.target - 1e-9)
        lo, hi = (scaling.min_replicas, scaling.max_replicas) if scaling is not None else (0, 10_000)
        desired = min(hi, max(lo, self.min_replicas, want), self.max_replicas)
        if desired <= s.total:
            return None
        reason = "panic" if want / max(s.ready, 1) >= self.panic_threshold else "stable"
        return ReplicaDecision(desired, reason, forecast=value)
