"""Team budget routes: set, read (with the window's spend and alerts) and remove a team's budget. Placement
(``POST /v1/placement/recommendations``) enforces it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas_plan import BudgetIn, BudgetStatusPublic
from gpufleet.api.types import IdPath

router = APIRouter(prefix="/v1/teams/{team_id}/budget", tags=["budgets"], responses=PROBLEM_RESPONSES)


@router.put("", response_model=BudgetStatusPublic)
def set_budget(team_id: IdPath, body: BudgetIn, services: ServicesDep, actor: CurrentActor) -> Any:
    """Set (or replace) the team's budget: ``limit_usd`` per calendar ``period`` (UTC). Admins only; audited."""
    return services.budgets.set(
        actor, team_id, limit_usd=body.limit_usd, period=body.period, enforce=body.enforce, alert_at=body.alert_at
    )


@router.get("", response_model=BudgetStatusPublic)
def get_budget(team_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    """The budget, the current window's metered and committed spend, and its alerts."""
    return services.budgets.status(actor, team_id)


@router.delete("", status_code=204)
def delete_budget(team_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Response:
    services.budgets.delete(actor, team_id)
    return Response(status_code=204)
