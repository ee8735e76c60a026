"""FinOps routes: rightsizing changes (read, apply, roll back, cancel) and gpufleet's own ``/metrics``.

``install(app)`` builds the :class:`FinOpsService` (on ``app.state.finops``), adds these routes and the decision
counter middleware. The middleware counts the decisions the real handlers return (placement: the pool tier and
reason; reservations: proposal status; approvals, rejections, cancellations: the new status; refusals: the
HTTP status), so ``gpufleet_decisions_total`` moves with the API's traffic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, FastAPI, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.adapters.metrics import GpufleetMetrics
from gpufleet.api.deps import CurrentActor
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.types import IdPath
from gpufleet.cost.changes import ChangeStatus
from gpufleet.service.auth import ADMINS, Role
from gpufleet.service.bootstrap import Services
from gpufleet.service.clock import RandomIds
from gpufleet.service.finops import FinOpsService

router = APIRouter(tags=["finops"], responses=PROBLEM_RESPONSES)
FLEET_READERS = (*ADMINS, Role.VIEWER)


class SpecPublic(BaseModel):
    cpu: float
    mem_gb: float
    gpus: int
    gpu_sku: str


class ChangeEventPublic(BaseModel):
    at_s: int
    to: str
    actor: str
    reason: str
    from_: str = Field(alias="from")


class ChangePublic(BaseModel):
    change_id: str
    workload_id: str
    ticket: str
    status: str
    before: SpecPublic
    after: SpecPublic
    requested_by: str
    created_at_s: int
    history: list[ChangeEventPublic]


class ChangeReason(BaseModel):
    model_config = {"extra": "forbid"}
    reason: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.#: -]{0,199}$")] = ""


def get_finops(request: Request) -> FinOpsService:
    finops: FinOpsService = request.app.state.finops
    return finops


@router.get("/v1/changes/{change_id}", response_model=ChangePublic, response_model_by_alias=True)
def get_change(change_id: IdPath, request: Request, actor: CurrentActor) -> Any:
    """A rightsizing change: specs before and after, status and history (app teams: their own team's only)."""
    return get_finops(request).get_change(actor, change_id)


def _transition(request: Request, actor: Any, change_id: str, target: ChangeStatus, body: ChangeReason | None) -> Any:
    return get_finops(request).transition(actor, change_id, target, body.reason if body else "")


@router.post("/v1/changes/{change_id}:apply", response_model=ChangePublic, response_model_by_alias=True)
def apply_change(
    change_id: IdPath, request: Request, actor: CurrentActor, body: Annotated[ChangeReason | None, Body()] = None
) -> Any:
    """Apply a proposed change: the workload's spec becomes the change's ``after`` (409 if it was edited since)."""
    return _transition(request, actor, change_id, ChangeStatus.APPLIED, body)


@router.post("/v1/changes/{change_id}:rollback", response_model=ChangePublic, response_model_by_alias=True)
def rollback_change(
    change_id: IdPath, request: Request, actor: CurrentActor, body: Annotated[ChangeReason | None, Body()] = None
) -> Any:
    """Roll back an applied change: the workload's spec returns to ``before`` (409 if it was edited since)."""
    return _transition(request, actor, change_id, ChangeStatus.ROLLED_BACK, body)


@router.post("/v1/changes/{change_id}:cancel", response_model=ChangePublic, response_model_by_alias=True)
def cancel_change(
    change_id: IdPath, request: Request, actor: CurrentActor, body: Annotated[ChangeReason | None, Body()] = None
) -> Any:
    """Cancel a change that was not applied."""
    return _transition(request, actor, change_id, ChangeStatus.CANCELLED, body)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, actor: CurrentActor) -> Response:
    """Prometheus exposition: decisions, queue lengths, per-team costs and GPU-hours of the last 7 days.

    Needs a bearer token of a fleet-wide role (viewer, finops_admin, ml_platform_admin): the series carry every
    team's cost, which an anonymous caller or an app team must not read (401 / 403). Prometheus scrapes it with
    ``authorization: {type: Bearer, credentials_file: ...}`` holding a viewer token (docs/service.md)."""
    actor.require(*FLEET_READERS)
    finops = get_finops(request)
    await run_in_threadpool(finops.refresh_gauges)
    body, ctype = finops.metrics.render()
    return Response(body, media_type=ctype)


_APPROVAL = re.compile(r"^/v1/reservations/[^/]+/(approve|reject|cancel|submit)$")


def _decision(method: str, path: str, status: int, body: bytes) -> tuple[str, str, str] | None:
    if method != "POST":
        return None
    if path == "/v1/placement/recommendations":
        stage = "placement"
    elif path == "/v1/reservations":
        stage = "reservation"
    elif m := _APPROVAL.match(path):
        stage = f"reservation_{m.group(1)}"
    else:
        return None
    if status >= 400:
        return stage, "refused", str(status)
    try:
        doc = json.loads(body)
    except ValueError:
        return stage, "ok", str(status)
    if stage == "placement":
        return stage, str(doc.get("tier") or "queue"), str(doc.get("reason", ""))
    return stage, str(doc.get("status", "ok")), str(status)


class DecisionCounter:
    """ASGI middleware: count the decisions the handlers returned (never changes a response), and drop the
    memoized FinOps books after any successful write (ingestion, reservations, workloads change the books), before
    the response starts: a client that reads right after its write returned never gets the books without it."""

    def __init__(self, app: ASGIApp, metrics: GpufleetMetrics, on_write: Callable[[], None]) -> None:
        self.app = app
        self.metrics = metrics
        self.on_write = on_write

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH", "DELETE"):
            await self.app(scope, receive, send)
            return
        counted = _decision(scope["method"], scope["path"], 200, b"{}") is not None  # a decision route?
        seen: dict[str, Any] = {"status": 0, "body": []}

        async def wrapped(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                seen["status"] = msg["status"]
                if msg["status"] < 400:  # the handler committed: drop the books before the client hears of it
                    self.on_write()
            elif msg["type"] == "http.response.body" and counted:
                seen["body"].append(msg.get("body", b""))
            await send(msg)

        try:
            await self.app(scope, receive, wrapped)
        finally:
            if seen["status"] == 0:  # no response (the handler raised): it may have written; drop the books
                self.on_write()
        if counted:
            d = _decision(scope["method"], scope["path"], seen["status"], b"".join(seen["body"]))
            if d is not None:
                self.metrics.record_decision(*d)


def install(app: FastAPI) -> None:
    """Wire FinOps into an app built by ``create_app`` (one call there)."""
    services: Services = app.state.services
    finops = FinOpsService(services.engine, services.clock, RandomIds())
    app.state.finops = finops
    app.include_router(router)
    app.add_middleware(DecisionCounter, metrics=finops.metrics, on_write=finops.invalidate)
