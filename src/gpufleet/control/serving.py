"""The replica autoscaler's decision for one serving workload from a series of measured request rates, as a world
that keeps no autoscaler state between requests asks for it (the service's ``.../autoscaling:decide``).

A fresh :class:`gpufleet.autoscale.replica.PredictiveReplicaAutoscaler` (the same the simulator's loop and the
autoscaling benchmark run) configured from the workload's bounds, target, price and budget replays the series
(oldest first, one point per ``period_s``) and the decision for the last point is returned: desired replicas
(always within [min, max]) with its reason code, the load it provisions for and the budget effect. With a short
series the autoscaler's forecaster is still warming up and sizes for up to twice the observed rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals

COLD_START_S = ServingScaling(1, 1, 1.0).cold_start_s  # the domain default for serving (210 s)


@dataclass(frozen=True, slots=True)
class ReplicaBounds:
    """What the workload declares: replicas in [min_replicas, max_replicas], ``target_rps`` per replica, the
    price of one replica, an optional daily budget, latency SLO and per-replica concurrency."""

    min_replicas: int
    max_replicas: int
    target_rps: float
    price_usd_per_replica_h: float
    budget_usd_day: float | None = None
    slo_s: float | None = None
    max_concurrency: int | None = None


def decide_replicas(
    bounds: ReplicaBounds,
    *,
    rps: Sequence[float],
    current: int,
    queue_depth: int,
    period_s: int,
    slo_misses: Sequence[float] = (),
    peak_in_flight: Sequence[float] = (),
) -> ReplicaDecision:
    """Replay ``rps`` (and the optional per-point SLO misses / peak in-flight requests) through a fresh
    autoscaler; ``queue_depth`` is the queue now (last point). ``rps`` must not be empty."""
    config = ReplicaAutoscalerConfig(
        min_replicas=bounds.min_replicas,
        max_replicas=bounds.max_replicas,
        target_per_replica=bounds.target_rps,
        cold_start_s=COLD_START_S,
        period_s=period_s,
        price_usd_per_replica_h=bounds.price_usd_per_replica_h,
        budget_usd_day=bounds.budget_usd_day,
        slo_s=bounds.slo_s,
        max_concurrency=bounds.max_concurrency,
    )
    scaler = PredictiveReplicaAutoscaler(config)
    decision = None
    for i, v in enumerate(rps):
        last = i == len(rps) - 1
        decision = scaler.decide(
            ReplicaSignals(
                now_s=float((i + 1) * period_s),
                ready=current,
                starting=0,
                period_s=float(period_s),
                arrival_rps=float(v),
                concurrency=0.0,
                queue_depth=queue_depth if last else 0,
                load_replicas=float(v) / bounds.target_rps,
                peak_concurrency=float(peak_in_flight[i]) if peak_in_flight else None,
                slo_misses=float(slo_misses[i]) if slo_misses else None,
            )
        )
    if decision is None:
        raise ValueError("rps: at least one request rate is needed")
    return decision
