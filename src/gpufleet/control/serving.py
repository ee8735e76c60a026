"""The replica autoscaler's decision for one serving workload from a series of measured request rates, as a world
that keeps no autoscaler state between requests asks for it (the service's ``.../autoscaling:decide``).

A fresh :func:`gpufleet.control.replicas.gpufleet_replica_policy` (the policy the simulator's gpufleet loop runs:
the predictive autoscaler under the spare replica, the step pre-warm and the noise floor) configured from the
workload's bounds, target, price and budget replays the series (oldest first, one point per ``period_s``) and the
decision for the last point is returned: desired replicas (always within [min, max]) with its reason code, the
load it provisions for and the budget effect (the spare and the floors never spend above the budget; a fleet the
policy scales to zero gets no spare). With a short series (fewer than about 30 forecaster buckets) the
autoscaler's forecaster is still warming up and sizes for the observed rate at the target utilization.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.control.replicas import gpufleet_replica_policy
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
    gpus_per_replica: int = 1,
) -> ReplicaDecision:
    """Replay ``rps`` (and the optional per-point SLO misses / peak in-flight requests) through a fresh
    :func:`~gpufleet.control.replicas.gpufleet_replica_policy` (the simulator's gpufleet loop runs the same);
    ``queue_depth`` is the queue now (last point). ``rps`` must not be empty."""
    if not rps:
        raise ValueError("rps: at least one request rate is needed")
    scaling = ServingScaling(
        bounds.min_replicas, bounds.max_replicas, bounds.target_rps, COLD_START_S, budget_usd_day=bounds.budget_usd_day
    )
    policy = gpufleet_replica_policy(period_s)
    policy.declare_fleet(
        scaling,
        gpus_per_replica=gpus_per_replica,
        slo_s=bounds.slo_s,
        max_concurrency=bounds.max_concurrency,
        price_usd_per_replica_h=bounds.price_usd_per_replica_h if bounds.price_usd_per_replica_h > 0 else None,
    )
    decision = None
    for i, v in enumerate(rps):
        last = i == len(rps) - 1
        decision = policy.decide(
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
            ),
            scaling,
        )
    assert decision is not None
    return decision
