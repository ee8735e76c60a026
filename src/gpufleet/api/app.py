"""The FastAPI application factory. Nothing is built at import time: ``create_app(settings)`` wires the
services (refusing an unmigrated database), and the lifespan runs the leader loop: at startup and then every
``leader_poll_s`` (if ``reconcile_interval_s`` > 0) this process keeps or takes the lead (:mod:`gpufleet.service.leader`);
the leader submits approved reservations and runs the full reconciler every ``reconcile_interval_s``, and the
control loop's planning pass (forecast -> propose -> re-evaluate placements, :mod:`gpufleet.service.reconciler`)
every ``plan_interval_s``.

The start-up pass (take the lead, reconcile with the provider) runs in the background: the lifespan waits for it at
most ``STARTUP_RECONCILE_WAIT_S``, then the server listens whatever the provider does (a provider that hangs, 10 s x
3 attempts per approved reservation, must not keep ``/healthz`` down past the startup probe). Its failure is logged,
never fatal; the periodic passes start once it has ended."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool

import gpufleet
from gpufleet.api import hardening, problems
from gpufleet.api.revision_writes import WritesAtRevision
from gpufleet.api.routes import budgets, fleet, health, registry, reservations, workloads
from gpufleet.api.routes import finops as finops_routes
from gpufleet.api.schemas import Problem
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.leader import SoleLeader, submit_approved
from gpufleet.service.settings import Settings
from gpufleet.service.uow import FencedOut, fenced

log = logging.getLogger("gpufleet.api")


class _LeaderLoop:
    """The background work of one process: keep or take the lead; as leader, submit what any process approved
    (every ``leader_poll_s``) and run the full reconciler on taking the lead and every ``reconcile_interval_s``."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._leading = False
        self._last_full_s = 0.0
        self._leading_since_s: int | None = None  # service clock: when this process took the lead
        self._paused: str | None = None  # why the last pass did not act (the store at another schema revision)

    def step(self, *, periodic: bool = True) -> None:
        """One pass (blocking: database and provider I/O). ``periodic``: a pass of the background cadence (the
        startup pass only keeps or takes the lead and reconciles with the provider); the leader's planning pass
        (``plan_interval_s``) runs on periodic passes when :meth:`Reconciler.due`. The store's schema revision is
        read first (:class:`~gpufleet.adapters.sql.migrate.RevisionWatch`): at another one than this code's, the
        process gives up the lead (a process at the store's revision takes it) and acts on nothing."""
        s = self._services
        if not self._at_revision():
            s.leader.close()  # hand the lead over (a no-op when not leading); requests do not submit meanwhile
            self._leading = False
            self._leading_since_s = None
            return
        if not s.leader.refresh():
            self._leading = False
            self._leading_since_s = None
            return
        now_s = time.monotonic()
        interval_s = s.settings.reconcile_interval_s
        try:
            with fenced(s.leader.epoch()):  # its writes commit only while this process's lead holds (service/uow.py)
                if not self._leading or (interval_s > 0 and now_s - self._last_full_s >= interval_s):
                    self._leading = True
                    self._last_full_s = now_s
                    report = s.reservations.reconcile()
                    if report.submitted or report.activated or report.expired or report.still_pending or report.errors:
                        log.info("reconcile: %s", report)
                else:
                    submit_approved(s.engine, s.reservations)
        except FencedOut as exc:  # another process leads now: this one's write rolled back
            log.warning("leader pass stopped: %s; giving up the lead", exc)
            s.leader.close()  # at once: requests no longer submit as leader; the next poll re-runs the election
            self._leading = False
            self._leading_since_s = None
            return
        if self._leading_since_s is None:
            self._leading_since_s = s.clock.now_s()
        plan_s = s.settings.plan_interval_s
        if periodic and plan_s > 0 and s.reconciler.due(plan_s, self._leading_since_s):
            done = s.reconciler.run_once()  # forecast -> propose -> re-evaluate placements (service/reconciler.py)
            if done.lead_lost:  # lost or fenced out during the pass: stop acting as leader, as above
                s.leader.close()
                self._leading = False
                self._leading_since_s = None

    def _at_revision(self) -> bool:
        """Whether the store is at this code's schema revision; a change either way is logged once."""
        why = self._services.revision.check()
        if why != self._paused:
            if why is None:
                log.info("leader loop resumed: the store is at this gpufleet's schema revision again")
            else:
                log.warning("leader loop paused, not leading: %s", why)
        self._paused = why
        return why is None


# how long the lifespan waits for the start-up pass before serving (the API's startup probe allows 60 s in all)
STARTUP_RECONCILE_WAIT_S = 3.0


async def _start_up(loop: _LeaderLoop, done: asyncio.Event) -> None:
    """The start-up pass: take the lead if free and, as leader, reconcile with the provider."""
    started_s = time.monotonic()
    try:
        await run_in_threadpool(lambda: loop.step(periodic=False))
    except Exception:  # a provider outage must not keep the API down; the periodic pass retries
        log.exception("startup reconcile failed")
    finally:
        done.set()
    if time.monotonic() - started_s > STARTUP_RECONCILE_WAIT_S:
        log.info("startup reconcile ended after %.0f s, in the background", time.monotonic() - started_s)


async def _background(loop: _LeaderLoop, poll_s: float | None, done: asyncio.Event) -> None:
    """The start-up pass, then (``poll_s`` not None) the periodic passes: one after the other, never two at once."""
    await _start_up(loop, done)
    if poll_s is not None:
        await _lead_forever(loop, poll_s)


async def _lead_forever(loop: _LeaderLoop, poll_s: float) -> None:
    while True:
        await asyncio.sleep(poll_s)
        try:
            await run_in_threadpool(loop.step)
        except Exception:  # keep serving; the next pass retries
            log.exception("leader pass failed")


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app. Pass ``services`` (from :func:`build_services`) to inject a clock, provider or crash hook."""
    if services is None:
        services = build_services(settings or Settings())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = services.settings.worker_threads
        loop = _LeaderLoop(services)
        poll_s: float | None = None
        if services.settings.reconcile_interval_s > 0:
            # one process (SQLite): nobody else approves, so only the full pass, every reconcile_interval_s
            sole = isinstance(services.leader, SoleLeader)
            poll_s = services.settings.reconcile_interval_s if sole else services.settings.leader_poll_s
        started = asyncio.Event()
        task = asyncio.create_task(_background(loop, poll_s, started))
        try:  # a quick start-up pass ends before the first request; a hung provider does not hold the server
            await asyncio.wait_for(started.wait(), STARTUP_RECONCILE_WAIT_S)
        except TimeoutError:
            log.warning("startup reconcile still running after %.0f s; serving meanwhile", STARTUP_RECONCILE_WAIT_S)
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await run_in_threadpool(services.leader.close)  # hand the lead over at once

    app = FastAPI(
        title="gpufleet control plane",
        version=gpufleet.__version__,
        description="Plans, buys, places, packs, scales and charges for GPU capacity. Errors are RFC 9457 "
        "problem+json. Authenticate with `Authorization: Bearer <token>` (see `gpufleet token create`).",
        lifespan=lifespan,
        docs_url=None,  # /docs is served by hardening with local Swagger UI assets (no CDN)
        redoc_url=None,
        dependencies=[Depends(hardening.refuse_unknown_query)],  # a /v1 query parameter no route declares: 422
    )
    app.state.services = services
    finops_routes.install(app)  # FinOps routes, /metrics, decision counters (app.state.finops)
    problems.install(app)
    app.add_middleware(WritesAtRevision, watch=services.revision)  # innermost: inside the body limit and the headers
    hardening.install(
        app, max_body_bytes=services.settings.max_body_bytes, max_upload_bytes=services.settings.max_upload_bytes
    )
    from gpufleet.api.routes.planning import router as planning_router  # own line: merges with other routers

    app.include_router(planning_router)
    from gpufleet.api.routes.cloud import router as cloud_router  # own line: merges with other routers

    app.include_router(cloud_router)
    from gpufleet.api.routes.planned_runs import router as planned_runs_router  # own line: merges with others

    app.include_router(planned_runs_router)
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
