"""Serving headroom around the replica autoscaler: spare replicas, and a floor under the last day's peak.

- Spare replicas above what the autoscaler asks for, so that losing a replica (a node failure) or a step in
  traffic the forecast missed costs no requests while the replacement cold-starts: one replica, or
  ``spare_gpus`` worth of replicas where replicas are small (a 1-GPU embedding replica is cheap insurance for
  the many requests it carries; a 4-GPU 70B replica is not).
- A floor of ``peak_floor`` times the most replicas the autoscaler asked for over the last ``window_s`` (a day):
  traffic moves by steps as well as by its daily cycle (ServeGen's daily means vary by CV ~0.22, so a new day
  can open 20-40% above the last), and a fleet scaled down to the night's trough meets such a step short for a
  whole control period. Holding part of the daily peak costs some GPU-hours at night, far fewer than common
  practice's fleet sized for the week's peak plus 20%.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler, ReplicaDecision, ReplicaSignals


@dataclass(slots=True)
class SpareReplicas(RatePolicy):
    """Spare replicas and a daily-peak floor over ``inner`` (see the module docstring), through the one
    replica-policy port: ``decide`` hands ``inner`` the fleet without its spare and adds the spare back."""

    inner: ReplicaAutoscaler
    period_s: float = 900.0
    spare: int = 1
    # spare GPUs per fleet: a fleet of small replicas keeps this many GPUs of spare replicas (more than one
    # replica where replicas are small, hence cheap for the requests they carry)
    spare_gpus: int = 0
    gpus_per_replica: dict[ServingScaling, int] = field(default_factory=dict)
    peak_floor: float = 0.0  # share of the window's peak ask held as a floor (0 = none)
    window_s: int = 86400
    # step pre-warm (:meth:`_step_floor`): before a time of day whose largest period-over-period jump of the rate
    # over ``step_days`` days (J) is an outlier among the day's slots (excess J - 1 at least ``step_outlier`` times
    # the median slot's), hold ``load x J`` replicas at 100% busy for the next two periods (0 days = off)
    step_days: int = 91
    step_min_days: int = 7
    step_outlier: float = 2.0
    name: str = "gpufleet"
    _asks: dict[ServingScaling, deque[int]] = field(default_factory=dict)
    _jumps: dict[ServingScaling, dict[int, deque[float]]] = field(default_factory=dict)
    _last_rps: dict[ServingScaling, float] = field(default_factory=dict)
    _slot_max: dict[ServingScaling, dict[int, float]] = field(default_factory=dict)

    def declare_fleet(
        self, scaling: ServingScaling, *, gpus_per_replica: int, slo_s: float | None, max_concurrency: int | None
    ) -> None:
        """What the world declares of one fleet: its replica size (the spare's GPUs) and, for gpufleet's inner
        policy, its latency SLO on queue wait and the requests one replica serves at once (None: batching)."""
        self.gpus_per_replica[scaling] = gpus_per_replica
        if isinstance(self.inner, PredictiveReplicas):
            self.inner.fleet_options[scaling] = {"slo_s": slo_s, "max_concurrency": max_concurrency}

    def _spare(self, scaling: ServingScaling) -> int:
        g = self.gpus_per_replica.get(scaling)
        return max(self.spare, self.spare_gpus // g) if g else self.spare

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        # the inner policy sees the fleet without its spare (taken from the replicas still starting first)
        off_starting = min(self.spare, signals.starting)
        off_ready = min(self.spare - off_starting, signals.ready)
        inner = replace(signals, starting=signals.starting - off_starting, ready=signals.ready - off_ready)
        d = self.inner.decide(inner, scaling)
        want, reason = d.desired, d.reason
        asks = self._asks.setdefault(scaling, deque())
        asks.append(want)
        while len(asks) > max(1, int(self.window_s // self.period_s)):
            asks.popleft()
        floor = math.ceil(self.peak_floor * max(asks) - 1e-9)
        if floor > want:
            want, reason = floor, "daily_peak_floor"
        step = self._step_floor(signals, scaling)
        if step > want:
            want, reason = step, "step_prewarm"
        return replace(d, desired=min(want + self._spare(scaling), scaling.max_replicas), reason=reason)

    def _step_floor(self, s: ReplicaSignals, scaling: ServingScaling) -> int:
        """Replicas (at 100% busy) for a step that recurs at this time of day, over the next two periods, so
        replicas are warm before the step rather than one cold start after it.

        Per time-of-day slot, the largest period-over-period ratio of the rate over the last ``step_days`` days
        (J). A slot is a step slot when its excess ``J - 1`` is at least ``step_outlier`` times the median slot's:
        the inner policy is already sized for the typical period-to-period change, so only such slots hold
        ``load x J``. The world observed slot ``k - 1`` (the period just ended); this decision serves slot ``k``."""
        if self.step_days <= 0:
            return 0
        n = max(1, round(86400 / self.period_s))
        k = round(s.now_s / self.period_s)
        jumps = self._jumps.setdefault(scaling, {})
        top = self._slot_max.setdefault(scaling, {})
        prev = self._last_rps.get(scaling)
        if prev is not None and prev > 0 and s.arrival_rps > 0:
            slot = (k - 1) % n
            h = jumps.setdefault(slot, deque(maxlen=self.step_days))
            h.append(s.arrival_rps / prev)
            if len(h) >= self.step_min_days:
                top[slot] = max(h)
        self._last_rps[scaling] = s.arrival_rps
        if len(top) < n:
            return 0
        typical = float(np.median(np.fromiter(top.values(), dtype=np.float64, count=len(top))))
        j = max(top[k % n], top[(k + 1) % n])
        if j <= 1.0 or j - 1.0 < self.step_outlier * max(typical - 1.0, 0.0):
            return 0
        return math.ceil(s.load_replicas * j - 1e-9)
