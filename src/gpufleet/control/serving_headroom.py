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
from dataclasses import dataclass, field

from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler, ServingObservation


@dataclass(slots=True)
class SpareReplicas:
    inner: ReplicaAutoscaler
    period_s: int = 900
    spare: int = 1
    # spare GPUs per fleet: a fleet of small replicas keeps this many GPUs of spare replicas (more than one
    # replica where replicas are small, hence cheap for the requests they carry)
    spare_gpus: int = 0
    gpus_per_replica: dict[ServingScaling, int] = field(default_factory=dict)
    peak_floor: float = 0.0  # share of the window's peak ask held as a floor (0 = none)
    window_s: int = 86400
    _asks: dict[ServingScaling, deque[int]] = field(default_factory=dict)

    def desired(
        self,
        *,
        current: int,
        observed_rps: float,
        scaling: ServingScaling,
        now_s: int,
        last_scale_down_s: int,
        observed: ServingObservation | None = None,
    ) -> tuple[int, str]:
        want, reason = self.inner.desired(
            current=max(current - self.spare, 0),  # the inner policy sees the fleet without its spare
            observed_rps=observed_rps,
            scaling=scaling,
            now_s=now_s,
            last_scale_down_s=last_scale_down_s,
            observed=observed,
        )
        asks = self._asks.setdefault(scaling, deque())
        asks.append(want)
        while len(asks) > max(1, self.window_s // self.period_s):
            asks.popleft()
        floor = math.ceil(self.peak_floor * max(asks) - 1e-9)
        if floor > want:
            want, reason = floor, "daily_peak_floor"
        g = self.gpus_per_replica.get(scaling)
        spare = max(self.spare, self.spare_gpus // g) if g else self.spare
        return min(want + spare, scaling.max_replicas), reason
