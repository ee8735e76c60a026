"""Baseline replica autoscaler: reactive target tracking on request rate (the HPA shape)."""

from __future__ import annotations

import math

from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ServingObservation


class TargetTracking:
    """desired = ceil(rps / (target_rps_per_replica * target_utilization)), clamped to [min, max].

    Scale-up is immediate; scale-down waits ``scaling.scale_down_delay_s`` since the last scale-down.
    """

    def __init__(self, target_utilization: float = 0.7) -> None:
        self.target_utilization = target_utilization

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
        del observed  # the HPA shape reads the request rate only
        per_replica = scaling.target_rps_per_replica * self.target_utilization
        want = math.ceil(observed_rps / per_replica) if observed_rps > 0 else 0
        want = max(scaling.min_replicas, min(scaling.max_replicas, want))
        if want > current:
            return want, "scale_up_rps"
        if want < current:
            if now_s - last_scale_down_s < scaling.scale_down_delay_s:
                return current, "scale_down_stabilizing"
            return want, "scale_down_rps"
        return current, "steady"
