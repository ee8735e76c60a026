"""RFC 9457 problem+json for every 4xx/5xx: our own errors, FastAPI's validation errors, Starlette's 404/405,
and unexpected exceptions (500, no internals leaked). ``field`` names the offending field."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.api.schemas import FieldProblem, Problem
from gpufleet.domain.errors import ConflictError, GpufleetError, NotFoundError, PermissionDenied, ValidationError
from gpufleet.service.auth import Unauthenticated

PROBLEM_MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("gpufleet.api")

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

_DOC = {"content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {**_DOC, "description": _TITLES[code]} for code in (400, 401, 403, 404, 409, 415, 422, 500, 503)
}


def problem(
    status: int,
    detail: str,
    *,
    request: Request,
    field: str | None = None,
    errors: Sequence[dict[str, str]] = (),
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = Problem(
        type="about:blank",
        title=_TITLES.get(status, "Error"),
        status=status,
        detail=detail,
        instance=request.url.path,
        field=field,
        errors=[FieldProblem(field=e["field"], message=e["message"]) for e in errors],
    )
    return JSONResponse(
        body.model_dump(mode="json"), status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers
    )


def _loc_to_field(loc: Sequence[int | str]) -> str:
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p not in ("function-after", "function-before") and not str(p).startswith(("function-", "json-")):
            out += ("." if out else "") + str(p)
    return out or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": _loc_to_field(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "message": "invalid request"}
        return problem(
            422, f"{first['field']}: {first['message']}", request=request, field=first["field"], errors=errors
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(status, "error")
        return problem(status, detail, request=request, headers=getattr(exc, "headers", None))

    @app.exception_handler(GpufleetError)
    async def _ours(request: Request, exc: GpufleetError) -> JSONResponse:
        if isinstance(exc, ValidationError):
            return problem(
                422, str(exc), request=request, field=exc.field, errors=[{"field": exc.field, "message": exc.message}]
            )
        if isinstance(exc, NotFoundError):
            return problem(404, str(exc), request=request)
        if isinstance(exc, ConflictError):
            return problem(409, str(exc), request=request)
        if isinstance(exc, PermissionDenied):
            return problem(403, str(exc), request=request)
        if isinstance(exc, Unauthenticated):
            return problem(401, str(exc), request=request, headers={"WWW-Authenticate": "Bearer"})
        status = getattr(exc, "http_status", None)
        if isinstance(status, int):
            return problem(status, str(exc), request=request)
        log.exception("unmapped gpufleet error")
        return problem(500, "internal error", request=request)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s: %r", request.method, request.url.path, exc, exc_info=exc)
        return problem(500, "internal error; see the server log", request=request)
