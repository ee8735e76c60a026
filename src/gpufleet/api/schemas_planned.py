"""Schemas of the planned-run calendar (``/v1/planned-runs``): what a team registers ahead of a large training
run, and the run as stored. Request bodies forbid unknown fields (a typo is a 422 naming the field)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gpufleet.api.schemas import Strict
from gpufleet.api.types import MAX_TIME_S, Id, Name, SkuId

MAX_RUN_GPUS = 1_000_000  # = service.planned_runs.MAX_GPUS
MAX_RUN_DURATION_S = 5 * 366 * 86_400  # = service.planned_runs.MAX_DURATION_S

RunGpus = Annotated[int, Field(gt=0, le=MAX_RUN_GPUS, strict=True)]
RunDuration = Annotated[int, Field(gt=0, le=MAX_RUN_DURATION_S, strict=True)]
RunStart = Annotated[int, Field(gt=0, le=MAX_TIME_S, strict=True)]
Probability = Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False, strict=True)]
RunStatus = Literal["scheduled", "running", "ended", "cancelled"]


class PlannedRunCreate(Strict):
    """A large training run registered ahead of time. ``start_s`` must be after the service clock's now; the
    region must hold a reserved pool of the SKU (where the procurer reserves ahead of the run); ``name`` is unique
    among the team's runs that are not cancelled."""

    name: Name
    team: Id
    sku: SkuId
    region: Id
    gpus: RunGpus
    start_s: RunStart = Field(description="When the run starts (UNIX seconds, UTC)")
    duration_s: RunDuration = Field(description="How long it runs (seconds)")
    probability: Probability = Field(default=1.0, description="How likely it is to go ahead, in (0, 1]")


class ReservedAhead(BaseModel):
    """A reservation the loop's procurer bought ahead of the run, as it stands now."""

    reservation_id: str
    units: int
    start_s: int
    status: str = Field(description="The reservation's status now (as GET /v1/reservations/{id} names it)")


class PlannedRunPublic(BaseModel):
    id: str
    name: str
    team: str
    sku: str
    region: str
    gpus: int
    start_s: int
    duration_s: int
    end_s: int
    probability: float
    registered_s: int = Field(description="When it was registered (the service clock)")
    created_by: str
    status: RunStatus = Field(description="By the service clock: scheduled, running, ended, or cancelled")
    active: bool = Field(description="Not cancelled (a cancelled run no longer counts for procurement)")
    cancelled_at_s: int | None
    cancelled_by: str | None
    reserved_ahead: list[ReservedAhead] = Field(
        default_factory=list,
        description="Reservations the loop's procurer bought ahead of this run (planned_run_reserve), oldest first; "
        "cancelling the run does not cancel them",
    )
