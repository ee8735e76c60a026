"""The planned-run calendar: a team registers a large training run ahead of time so that the loop's procurer
reserves ahead of it (``POST /v1/plans:propose`` and the reconciler's pass read the calendar of the SKU-region).
Admins write for any team, an app_team token for its own team only (and reads only its own), a viewer reads."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas_planned import PlannedRunCreate, PlannedRunPublic
from gpufleet.api.types import ID_PATTERN, SKU_PATTERN, IdPath, Limit, Offset
from gpufleet.service.planned_runs import PlannedRunSpec

router = APIRouter(prefix="/v1/planned-runs", tags=["planned-runs"], responses=PROBLEM_RESPONSES)


@router.post("", status_code=201, response_model=PlannedRunPublic)
def register_planned_run(body: PlannedRunCreate, services: ServicesDep, actor: CurrentActor) -> Any:
    """Register a run: 422 naming the field for a start not in the future, an unknown team, SKU or region, a
    region without a reserved pool of the SKU, or a name the team already uses for a run not cancelled."""
    return services.planned_runs.register(actor, PlannedRunSpec(**body.model_dump()))


@router.get("", response_model=list[PlannedRunPublic])
def list_planned_runs(
    services: ServicesDep,
    actor: CurrentActor,
    team: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    sku: Annotated[str | None, Query(pattern=SKU_PATTERN)] = None,
    active: Annotated[bool | None, Query(description="true: not cancelled; false: cancelled; omitted: both")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Any:
    """Registered runs by start time. An app_team token sees only its own team's."""
    return services.planned_runs.list(actor, team=team, sku=sku, active=active, limit=limit, offset=offset)


@router.get("/{run_id}", response_model=PlannedRunPublic)
def get_planned_run(run_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    return services.planned_runs.get(actor, run_id)


@router.delete("/{run_id}", response_model=PlannedRunPublic)
def cancel_planned_run(run_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    """Cancel the run (the row stays, ``status: cancelled``): from the next procurement decision on it no longer
    counts. Cancelling a cancelled run returns it unchanged."""
    return services.planned_runs.cancel(actor, run_id)
