"""Workload routes: create, read (own team only for app_team), autoscaling, cost, rightsizing."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response

from gpufleet.api import seed_examples as seed
from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas_workloads import (
    AutoscalingPublic,
    AutoscalingUpdate,
    RightsizingAccepted,
    RightsizingApply,
    WorkloadCostPublic,
    WorkloadCreate,
    WorkloadCreated,
    WorkloadPublic,
)
from gpufleet.api.types import ID_PATTERN, IdPath, Limit, Offset, WindowQuery
from gpufleet.domain.errors import ValidationError
from gpufleet.service.windows import parse_window_s
from gpufleet.service.workloads import WorkloadSpec

router = APIRouter(prefix="/v1/workloads", tags=["workloads"], responses=PROBLEM_RESPONSES)


@router.post("", status_code=201, response_model=WorkloadCreated)
def create_workload(
    body: Annotated[WorkloadCreate, Body(openapi_examples=seed.example(seed.WORKLOAD))],
    services: ServicesDep,
    actor: CurrentActor,
) -> Any:
    wid = services.workloads.create(actor, WorkloadSpec(**body.model_dump()))
    return {"workload_id": wid}


@router.get("", response_model=list[WorkloadPublic])
def list_workloads(
    services: ServicesDep,
    actor: CurrentActor,
    team: str | None = Query(default=None, pattern=ID_PATTERN),
    limit: Limit = 100,
    offset: Offset = 0,
) -> Any:
    """Workloads, optionally of one team. An app_team token sees only its own team's."""
    return services.workloads.list(actor, team=team, limit=limit, offset=offset)


@router.get("/{workload_id}", response_model=WorkloadPublic)
def get_workload(workload_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    return services.workloads.get(actor, workload_id)


@router.delete("/{workload_id}", status_code=204)
def delete_workload(workload_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Response:
    services.workloads.delete(actor, workload_id)
    return Response(status_code=204)


@router.put("/{workload_id}/autoscaling", response_model=AutoscalingPublic)
def set_autoscaling(
    workload_id: IdPath,
    body: AutoscalingUpdate,
    services: ServicesDep,
    actor: CurrentActor,
    if_match: Annotated[str | None, Header(pattern=r'^(W/)?"?[0-9]{1,10}"?$')] = None,
) -> Any:
    """Set min/max replicas, the target rate per replica and, optionally, the queue-wait SLO and the requests
    one replica serves at once (a PUT: an omitted optional field is cleared). Send the version you read (body ``version`` or
    ``If-Match``); a stale version gets 409. Returns the new version."""
    expected = body.version
    if if_match is not None:
        header_version = int(if_match.removeprefix("W/").strip('"'))
        if expected is not None and expected != header_version:
            raise ValidationError("If-Match", "disagrees with body version")
        expected = header_version
    version = services.workloads.set_autoscaling(
        actor,
        workload_id,
        min_replicas=body.min,
        max_replicas=body.max,
        target_rps=body.target_rps,
        expected_version=expected,
        slo_s=body.slo_s,
        max_concurrency=body.max_concurrency,
    )
    return {"workload_id": workload_id, "version": version}


@router.get("/{workload_id}/cost", response_model=WorkloadCostPublic)
def workload_cost(
    workload_id: IdPath, request: Request, services: ServicesDep, actor: CurrentActor, window: WindowQuery = "7d"
) -> Any:
    """Cost over the window through the cost package (allocated vs used GPU-hours, direct/idle/shared, by tier),
    idle share, and rightsizing (the GPU-count baseline plus the cost package's CPU/memory/GPU/SKU advice)."""
    window_s = parse_window_s(window)
    out = services.usage.workload_cost(actor, workload_id, window_s=window_s)  # 403 for another team
    view = request.app.state.finops.workload_view(workload_id, window_s)
    rec = view.pop("recommendation")
    if view["allocated_gpu_h"] > 0:
        out["cost_usd"] = view["total_usd"]
        if view["utilization"] is not None:
            out["idle_pct"] = round(1.0 - view["utilization"], 4)  # a fraction (0.75 = 75 % idle), as the design
    out.update(view, price_basis="cost_package")
    out["idle_waste_usd"] = request.app.state.finops.idle_waste(window_s, workload_id=workload_id)["idle_waste_usd"]
    out["rightsizing"]["recommendation"] = rec
    return out


@router.post("/{workload_id}/rightsizing:apply", status_code=202, response_model=RightsizingAccepted)
def apply_rightsizing(
    workload_id: IdPath, body: RightsizingApply, request: Request, services: ServicesDep, actor: CurrentActor
) -> Any:
    """Record a rightsizing change (status ``pending`` = proposed); apply it with ``POST /v1/changes/{id}:apply``
    and undo it with ``:rollback``. ``gpus``/``gpu_sku`` default to the workload's current ones."""
    cid = request.app.state.finops.request_change(
        actor, services.workloads.get_row_held, workload_id, cpu=body.cpu, mem_gb=body.mem_gb, ticket=body.ticket,
        gpus=body.gpus, gpu_sku=body.gpu_sku,
    )  # fmt: skip
    return {"change_id": cid, "status": "pending", "ticket": body.ticket, "href": f"/v1/changes/{cid}"}
