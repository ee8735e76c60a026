"""Replica-count decisions for observed Deployments, through the one replica-policy port.

:func:`gpufleet_replica_policy` builds gpufleet's policy (the one the simulator's loop runs).
:func:`decide_scale` asks a :class:`~gpufleet.ports.ReplicaAutoscaler` (the same interface the simulator
uses) for the desired count and returns a :class:`ScaleDecision` with its reason code. Scale to zero is
guarded twice: the policy honours ``min_replicas`` and this function never returns 0 unless
``scaling.min_replicas == 0`` (reason ``min_replicas_floor`` when it had to lift a decision).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.control.observation import ObservedDeployment
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler


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
    floor = max(0, scaling.min_replicas)
    if want < floor:
        want, reason = floor, "min_replicas_floor"
    return ScaleDecision(dep.namespace, dep.name, dep.replicas, min(want, scaling.max_replicas), reason)
