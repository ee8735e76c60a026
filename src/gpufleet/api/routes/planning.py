"""Planning routes: placement with graceful degradation, pool signals, quota outlook, the loop's procurer ->
pending reservations, forecast accuracy, and the replica autoscaler's decision for a workload."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query

from gpufleet.api import seed_examples as seed
from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas_plan import (
    AutoscalingDecision,
    ForecastAccuracyPublic,
    PlacementRecommendation,
    PlacementReleasePublic,
    PlacementRequestCreate,
    PlanProposeIn,
    PlanProposePublic,
    PlanRegionsPublic,
    PoolSignalIn,
    PoolSignalPublic,
    QuotaOutlookPublic,
)
from gpufleet.api.types import IDEMPOTENCY_KEY_PATTERN, SKU_PATTERN, IdPath, Limit, Offset
from gpufleet.domain.workloads import DegradeOption, Priority, WorkloadKind
from gpufleet.place.degrade import RunningWork
from gpufleet.service.placement_chain import ChainPlacementRequest

router = APIRouter(tags=["planning"], responses=PROBLEM_RESPONSES)
OptionalSku = Annotated[str | None, Query(pattern=SKU_PATTERN)]
Rate = Annotated[float, Query(ge=0.0, le=1e9, allow_inf_nan=False)]


@router.post("/v1/placement/recommendations", response_model=PlacementRecommendation)
def placement_recommendation(
    body: Annotated[PlacementRequestCreate, Body(openapi_examples=seed.example(seed.PLACEMENT))],
    services: ServicesDep,
    actor: CurrentActor,
    idempotency_key: Annotated[str | None, Header(pattern=IDEMPOTENCY_KEY_PATTERN)] = None,
) -> Any:
    """Pool, region and the ordered fallback chain (each link with its trigger); when no pool takes the job:
    a declared degrade option, preemption of lower priority work, or a deadline-aware queue decision with the
    expected start. An exhausted pool is a skipped link with its reason, never an error. Send an
    ``Idempotency-Key`` header with ``admit: true`` to make retries safe: the same key (per caller) returns the first
    answer and books nothing again; with another request it is a 409. A recommendation books nothing: no key used."""
    req = ChainPlacementRequest(
        job_class=WorkloadKind(body.job_class),
        priority=Priority.parse(body.priority),
        sku_id=body.sku,
        gpus=body.gpus,
        regions=tuple(body.regions),
        checkpointable=body.checkpointable,
        replicas=body.replicas,
        deadline_s=body.deadline_s,
        expected_run_s=body.expected_run_s,
        degrade_options=tuple(DegradeOption(o.gpus, o.sku, o.min_replicas) for o in body.degrade_options),
        running=tuple(
            RunningWork(r.workload_id, r.pool, r.gpus, Priority.parse(r.priority), WorkloadKind(r.job_class))
            for r in body.running
        ),
        team=body.team,
        admit=body.admit,
        replica_gpu_memory_gb=body.replica_gpu_memory_gb,
    )
    return services.placement.recommend(actor, req, client_key=idempotency_key)


@router.delete("/v1/placement/admissions/{key}", response_model=PlacementReleasePublic)
def release_admission(key: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    """Release the caller's admission made under ``Idempotency-Key: key`` (the preemption was abandoned, or the job
    finished): the GPUs it added to its pool's ``allocated_gpus`` are taken off, its victims are no longer promised
    to it, its budget commitment ends now; audited. A second release answers the same and frees nothing again;
    another caller's (or an unknown, or a pruned) key is a 404; a viewer gets 403."""
    return services.placement.release(actor, key)


@router.put("/v1/placement/signals", response_model=PoolSignalPublic)
def set_pool_signal(body: PoolSignalIn, services: ServicesDep, actor: CurrentActor) -> Any:
    """Report a pool's stockout and expected queue wait (what placement uses as triggers)."""
    return services.placement.set_signal(
        actor, pool_id=body.pool, stockout=body.stockout, queue_wait_s=body.queue_wait_s
    )


@router.get("/v1/placement/signals", response_model=list[PoolSignalPublic])
def list_pool_signals(services: ServicesDep, actor: CurrentActor, limit: Limit = 1000, offset: Offset = 0) -> Any:
    """The pools' reported signals by pool id, each with when it expires and whether it is ``stale`` (older than
    the setting ``placement_signal_max_age_s``: placement no longer counts it)."""
    return services.placement.signals(actor, limit=limit, offset=offset)


@router.get("/v1/quotas/outlook", response_model=QuotaOutlookPublic)
def quotas_outlook(
    services: ServicesDep,
    actor: CurrentActor,
    sku: OptionalSku = None,
    days: Annotated[int, Query(ge=1, le=730)] = 90,
    increase_lead_days: Annotated[int, Query(ge=0, le=365)] = 14,
) -> Any:
    """Per provider/region/SKU pool: when forecast demand exhausts the quota, and the date by which an
    increase must be requested given its lead time."""
    return services.quota_outlook.outlook(actor, sku_id=sku, days=days, increase_lead_days=increase_lead_days)


@router.get("/v1/plans/regions", response_model=PlanRegionsPublic)
def plan_regions(services: ServicesDep, actor: CurrentActor, sku: OptionalSku = None) -> Any:
    """Where today's planning pass plans each SKU (with utilization in the last 28 days or planned runs to come):
    each region with a reserved pool where it ran or where runs are registered, on that region's records, and its
    main region on the rest; the runs each plan reads; how much of its use names no region."""
    return services.procurement.plan_regions_view(actor, sku)


@router.post("/v1/plans:propose", response_model=PlanProposePublic)
def plans_propose(body: PlanProposeIn, services: ServicesDep, actor: CurrentActor) -> Any:
    """Ask the loop's procurer (the one the reconciler and the simulator run) for the SKU in the region, on the
    context built from the store (its last 28 days of utilization, the region's reserved pool, the loop's
    forecast, what is held or pending), and create its proposals as pending reservations (the approval workflow
    applies: dual approval above the threshold). Idempotent per order; what is held or pending is not re-bought."""
    return services.procurement.commit(actor, sku_id=body.sku, region_id=body.region, forecast_h=body.within_days * 24)


@router.get("/v1/capacity/forecast/accuracy", response_model=ForecastAccuracyPublic)
def forecast_accuracy(
    services: ServicesDep,
    actor: CurrentActor,
    sku: OptionalSku = None,
    last: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> Any:
    """MASE, scaled pinball and 80% coverage per series of the forecasts served by GET /v1/capacity/forecast,
    scored on the days elapsed since against the utilization records."""
    return services.accuracy.accuracy(actor, sku_id=sku, last=last)


@router.get("/v1/workloads/{workload_id}/autoscaling/decision", response_model=AutoscalingDecision)
def autoscaling_decision(
    workload_id: IdPath,
    services: ServicesDep,
    actor: CurrentActor,
    rps: Annotated[list[Rate], Query(min_length=1, max_length=1440)],
    replicas: Annotated[int | None, Query(ge=0, le=10_000)] = None,
    queue_depth: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    period_s: Annotated[int, Query(ge=1, le=3600)] = 60,
    slo_misses: Annotated[list[Rate] | None, Query(max_length=1440)] = None,
    peak_in_flight: Annotated[list[Rate] | None, Query(max_length=1440)] = None,
) -> Any:
    """The predictive replica autoscaler's decision for the workload's stored min/max/target_rps (and SLO and
    per-replica concurrency, when set): send the recent request rates oldest first (``rps=..&rps=..``), one per
    ``period_s``; optionally, per point too, the requests that waited past the SLO (``slo_misses``, for the SLO
    error budget) and the most requests in flight (``peak_in_flight``, for a one-request-per-replica floor)."""
    return services.autoscaling.decision(
        actor,
        workload_id,
        rps=rps,
        replicas=replicas,
        queue_depth=queue_depth,
        period_s=period_s,
        slo_misses=slo_misses or (),
        peak_in_flight=peak_in_flight or (),
    )
