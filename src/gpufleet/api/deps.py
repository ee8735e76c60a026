"""Annotated dependency aliases: ``ServicesDep`` (the wired services) and ``CurrentActor`` (from the bearer
token; 401 when missing or invalid)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpufleet.service.auth import Actor
from gpufleet.service.bootstrap import Services

_bearer = HTTPBearer(auto_error=False, description="API token from `gpufleet token create`")


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_actor(
    services: ServicesDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Actor:
    """Async so that a cached token costs no thread hop; a cache miss looks the token up in a worker thread."""
    token = creds.credentials if creds is not None else None
    hit = services.auth.cached(token)
    if hit is not None:
        return hit
    return await run_in_threadpool(services.auth.actor_for, token)


CurrentActor = Annotated[Actor, Depends(get_actor)]
