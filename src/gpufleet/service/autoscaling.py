"""The replica autoscaler's decision for a stored serving workload, by the control loop's
:func:`gpufleet.control.serving.decide_replicas`: gpufleet's replica policy, the one the simulator's gpufleet loop
runs (:func:`gpufleet.control.replicas.gpufleet_replica_policy`).

Stateless and explicit: the caller sends the recent request rates (oldest first, one per ``period_s``), the
replicas running now and the queue depth. A fresh autoscaler configured from the workload's stored
``min_replicas`` / ``max_replicas`` / ``target_rps`` (set by ``PUT .../autoscaling``) and ``budget_usd_day``
replays the series and returns its decision for the last one: desired replicas (always within
[min, max]), the reason code, the load it provisions for, and the budget (spend per day at the
replica price, whether the budget bound the decision or had to be exceeded to honour ``min``).

Replica price = on-demand catalog price of the workload's SKU x its GPUs per replica; cold start = the
domain default for serving (210 s). With a short series the autoscaler's forecaster is still warming up and
sizes for the observed rate at the target utilization; it learns its own errors as the series grows (up to 1,440
points).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from gpufleet.control.serving import ReplicaBounds, decide_replicas
from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.errors import ValidationError
from gpufleet.service.auth import Actor
from gpufleet.service.uow import UnitOfWork
from gpufleet.service.workloads import WorkloadService

MAX_POINTS = 1440


class AutoscalingService:
    def __init__(self, engine: Engine, workloads: WorkloadService) -> None:
        self._engine = engine
        self._workloads = workloads

    def decision(
        self,
        actor: Actor,
        workload_id: str,
        *,
        rps: Sequence[float],
        replicas: int | None,
        queue_depth: int,
        period_s: int,
        slo_misses: Sequence[float] = (),
        peak_in_flight: Sequence[float] = (),
    ) -> dict[str, Any]:
        if not 1 <= len(rps) <= MAX_POINTS:
            raise ValidationError("rps", f"send 1..{MAX_POINTS} request rates, oldest first")
        for name, values in (("slo_misses", slo_misses), ("peak_in_flight", peak_in_flight)):
            if values and len(values) != len(rps):
                raise ValidationError(name, f"send one value per rps point ({len(rps)}), got {len(values)}")
        with UnitOfWork(self._engine, write=False) as uow:
            row = self._workloads.get_row(uow, actor, workload_id)  # 404 / team check
            kind, sku, gpus = row.kind, row.gpu_sku, row.gpus
            lo, hi, target = row.min_replicas, row.max_replicas, row.target_rps
            slo_s, max_concurrency = row.slo_s, row.max_concurrency
            budget = None if row.budget_cents_day is None else row.budget_cents_day / 100
            version = row.version
        if kind != "serving":
            raise ValidationError("workload_id", "only serving workloads have a replica autoscaler")
        if not target or target <= 0:
            raise ValidationError("target_rps", "set target_rps > 0 with PUT /v1/workloads/{id}/autoscaling first")
        price = PRICES_BY_SKU.get(sku)
        price_h = float(price.on_demand) * max(gpus, 1) if price is not None else 0.0
        current = lo if replicas is None else replicas
        bounds = ReplicaBounds(lo, hi, target, price_h, budget, slo_s, max_concurrency)
        decision = decide_replicas(
            bounds,
            rps=rps,
            current=current,
            queue_depth=queue_depth,
            period_s=period_s,
            slo_misses=slo_misses,
            peak_in_flight=peak_in_flight,
            gpus_per_replica=max(gpus, 1),
        )
        return {
            "workload_id": workload_id,
            "version": version,
            "min": lo,
            "max": hi,
            "target_rps": target,
            "slo_s": slo_s,
            "max_concurrency": max_concurrency,
            "current_replicas": current,
            "desired_replicas": decision.desired,
            "reason": decision.reason,
            "forecast_rps": round(decision.forecast, 6),
            "budget": {
                "budget_usd_day": budget,
                "price_usd_per_replica_h": round(price_h, 6),
                "spend_usd_day": round(decision.desired * price_h * 24, 2)
                if decision.spend_usd_day is None
                else round(decision.spend_usd_day, 2),
                "bound": decision.budget_bound,
                "exceeded": decision.budget_exceeded,
                "degrade": decision.degrade,
            },
        }
