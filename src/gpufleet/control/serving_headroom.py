"""N+1 serving: one replica above what the replica autoscaler asks for, so that losing a replica (a node
failure, a preempted or drained node) or a ramp the forecast missed by one replica costs no requests while the
replacement cold-starts. The spare is the cheapest insurance a serving fleet can buy: one replica, against the
peak-sized static fleets of common practice."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler


@dataclass(slots=True)
class SpareReplicas:
    inner: ReplicaAutoscaler
    spare: int = 1

    def desired(
        self, *, current: int, observed_rps: float, scaling: ServingScaling, now_s: int, last_scale_down_s: int
    ) -> tuple[int, str]:
        want, reason = self.inner.desired(
            current=max(current - self.spare, 0),
            observed_rps=observed_rps,
            scaling=scaling,
            now_s=now_s,
            last_scale_down_s=last_scale_down_s,
        )
        return min(want + self.spare, scaling.max_replicas), reason
