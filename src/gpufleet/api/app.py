"""The FastAPI application factory. Nothing is built at import time: ``create_app(settings)`` wires the
services (refusing an unmigrated database), and the lifespan runs the reconciler at startup and then every
``reconcile_interval_s``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

import gpufleet
from gpufleet.api import hardening, problems
from gpufleet.api.routes import budgets, fleet, health, registry, reservations, workloads
from gpufleet.api.routes import finops as finops_routes
from gpufleet.api.schemas import Problem
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.settings import Settings

log = logging.getLogger("gpufleet.api")


async def _reconcile_forever(services: Services, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await run_in_threadpool(services.reservations.reconcile)
        except Exception:  # keep serving; the next pass retries
            log.exception("reconciler pass failed")


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app. Pass ``services`` (from :func:`build_services`) to inject a clock, provider or crash hook."""
    if services is None:
        services = build_services(settings or Settings())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = services.settings.worker_threads
        try:
            report = await run_in_threadpool(services.reservations.reconcile)
        except Exception:  # a provider outage must not keep the API down; the periodic pass retries
            log.exception("startup reconcile failed")
        else:
            if report.submitted or report.activated or report.expired or report.still_pending:
                log.info("startup reconcile: %s", report)
        task = None
        if services.settings.reconcile_interval_s > 0:
            task = asyncio.create_task(_reconcile_forever(services, services.settings.reconcile_interval_s))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(
        title="gpufleet control plane",
        version=gpufleet.__version__,
        description="Plans, buys, places, packs, scales and charges for GPU capacity. Errors are RFC 9457 "
        "problem+json. Authenticate with `Authorization: Bearer <token>` (see `gpufleet token create`).",
        lifespan=lifespan,
        docs_url=None,  # /docs is served by hardening with local Swagger UI assets (no CDN)
        redoc_url=None,
    )
    app.state.services = services
    finops_routes.install(app)  # FinOps routes, /metrics, decision counters (app.state.finops)
    problems.install(app)
    hardening.install(
        app, max_body_bytes=services.settings.max_body_bytes, max_upload_bytes=services.settings.max_upload_bytes
    )
    from gpufleet.api.routes.planning import router as planning_router  # own line: merges with other routers

    app.include_router(planning_router)
    from gpufleet.api.routes.cloud import router as cloud_router  # own line: merges with other routers

    app.include_router(cloud_router)
    for router in (health.router, reservations.router, workloads.router, fleet.router, registry.router, budgets.router):
        app.include_router(router)
    _add_problem_schema(app)
    return app


def _add_problem_schema(app: FastAPI) -> None:
    """Register the Problem schema in components (the error responses reference it)."""
    original = app.openapi

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            schema = original()
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in problem_schema.pop("$defs", {}).items():
                comps.setdefault(name, sub)
            comps["Problem"] = problem_schema
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
