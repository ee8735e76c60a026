"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter

from gpufleet.adapters.sql.migrate import current_revision, head_revision
from gpufleet.api.deps import ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas import Health, Ready
from gpufleet.domain.errors import GpufleetError

router = APIRouter(tags=["health"], responses={500: PROBLEM_RESPONSES[500]})


class NotReady(GpufleetError):
    """The database is unreachable or behind; answered as 503 so load balancers take the instance out."""

    http_status = 503


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process is up (no dependency is checked)."""
    return Health(status="ok")


@router.get("/readyz", response_model=Ready, responses={503: PROBLEM_RESPONSES[503]})
def readyz(services: ServicesDep) -> Ready:
    """The database answers and its schema is at the revision this code needs."""
    try:
        have = current_revision(services.engine)
    except Exception as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from None
    need = head_revision(services.engine)
    if have != need:
        raise NotReady(f"schema at {have}, need {need}")
    return Ready(status="ready", schema_revision=have)
