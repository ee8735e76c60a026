"""Liveness and readiness.

``/healthz`` is async and touches nothing: it runs on the event loop, never waits for a worker thread or the
database, so it answers while every handler thread is stuck on a hung database. ``/readyz`` checks the database
in threads of its own (at most 2, never the API's) and gives up after the connect timeout plus one second: a
database that does not answer is a 503 with ``Retry-After``, not a hung probe.
"""

from __future__ import annotations

import anyio
import anyio.to_thread
from fastapi import APIRouter

from gpufleet.adapters.sql.migrate import current_revision, head_revision
from gpufleet.api.deps import ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas import Health, Ready
from gpufleet.domain.errors import GpufleetError
from gpufleet.service.settings import Settings

router = APIRouter(tags=["health"], responses={500: PROBLEM_RESPONSES[500]})
_READY_THREADS: list[anyio.CapacityLimiter] = []  # the probe's own 2 threads (built on first use, in the loop)


def _ready_threads() -> anyio.CapacityLimiter:
    if not _READY_THREADS:
        _READY_THREADS.append(anyio.CapacityLimiter(2))
    return _READY_THREADS[0]


def ready_budget_s(settings: Settings) -> float:
    """How long ``/readyz`` waits for the database before answering 503: the connect timeout plus one second. The
    readiness probe's ``timeoutSeconds`` must exceed it (deploy/kustomize/base/api.yaml; tests/deploy check it), or a
    slow but working database reads as a probe timeout instead of the route's answer."""
    return settings.db_connect_timeout_s + 1.0


class NotReady(GpufleetError):
    """The database is unreachable or behind; answered as 503 so load balancers take the instance out."""

    http_status = 503


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up and its event loop answers (no dependency is checked, no worker thread is used)."""
    return Health(status="ok")


@router.get("/readyz", response_model=Ready, responses={503: PROBLEM_RESPONSES[503]})
async def readyz(services: ServicesDep) -> Ready:
    """The database answers within the connect timeout and its schema is at the revision this code needs."""
    budget_s = ready_budget_s(services.settings)
    have: str | None = None
    with anyio.move_on_after(budget_s) as scope:
        try:
            have = await anyio.to_thread.run_sync(
                current_revision, services.engine, abandon_on_cancel=True, limiter=_ready_threads()
            )
        except Exception as exc:
            raise NotReady(f"database unreachable: {type(exc).__name__}") from None
    if scope.cancelled_caught:
        raise NotReady(f"database did not answer within {budget_s:.0f} s")
    need = head_revision(services.engine)
    if have != need:
        raise NotReady(f"schema at {have}, need {need}")
    return Ready(status="ready", schema_revision=have)
