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
    413: "Content Too Large",
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


def field_problem(
    status: int, field: str, message: str, request: Request, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A problem about one named field: ``detail`` is ``"field: message"`` and ``errors`` holds the pair."""
    return problem(
        status,
        f"{field}: {message}",
        request=request,
        field=field,
        errors=[{"field": field, "message": message}],
        headers=headers,
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


def _error_entry(e: dict[str, Any]) -> dict[str, str]:
    """One pydantic/FastAPI error as ``{field, message}``; a JSON syntax error names the body and the position
    (FastAPI reports it at loc ``("body", <character offset>)``, which is no field)."""
    if e.get("type") == "json_invalid":
        loc = e.get("loc", ())
        pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
        why = (e.get("ctx") or {}).get("error", "")
        at = f" at character {pos}" if pos is not None else ""
        return {"field": "body", "message": f"invalid JSON{at}: {why}" if why else f"invalid JSON{at}"}
    return {"field": _loc_to_field(e.get("loc", ())), "message": str(e.get("msg", ""))}


def _unparsable_body(exc: StarletteHTTPException) -> str | None:
    """Why FastAPI could not parse the body (its 400 "error parsing the body" hides the cause), or None."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError):
        return f"not UTF-8 (byte {cause.start}); send JSON encoded as UTF-8"
    if isinstance(cause, RecursionError):
        return "JSON nested too deeply"
    if isinstance(cause, ValueError):  # e.g. an integer longer than Python's 4300-digit limit
        return f"not valid JSON: {str(cause).splitlines()[0][:200]}"
    return None


_NOT_AN_OBJECT = {"model_attributes_type", "dict_type", "model_type"}


def _wrong_media_type(request: Request, errors: Sequence[dict[str, Any]]) -> str | None:
    """The request's Content-Type when the body was refused as "not an object" because it was not sent as JSON
    (FastAPI then hands the model the raw bytes); None otherwise."""
    ctype = request.headers.get("content-type", "")
    media = ctype.split(";", 1)[0].strip().lower()
    if not media or media == "application/json" or media.endswith("+json"):
        return None
    body_level = [e for e in errors if tuple(e.get("loc", ())) == ("body",)]
    if body_level and all(e.get("type") in _NOT_AN_OBJECT for e in body_level):
        return ctype
    return None


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = list(exc.errors())
        media = _wrong_media_type(request, raw)
        if media is not None:
            return field_problem(415, "content-type", f"send the body as application/json, got {media!r}", request)
        errors = [_error_entry(e) for e in raw]
        first = errors[0] if errors else {"field": "body", "message": "invalid request"}
        return problem(
            422, f"{first['field']}: {first['message']}", request=request, field=first["field"], errors=errors
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        headers = getattr(exc, "headers", None)
        msg = _unparsable_body(exc)
        if msg is not None:
            return field_problem(400, "body", msg, request)
        if isinstance(exc.detail, dict) and {"field", "message"} <= exc.detail.keys():  # the dashboard's guard
            return field_problem(status, str(exc.detail["field"]), str(exc.detail["message"]), request, headers)
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(status, "error")
        return problem(status, detail, request=request, headers=headers)

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
            headers = {"Retry-After": "5"} if status == 503 else None
            return problem(status, str(exc), request=request, headers=headers)
        log.exception("unmapped gpufleet error")
        return problem(500, "internal error", request=request)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s: %r", request.method, request.url.path, exc, exc_info=exc)
        return problem(500, "internal error; see the server log", request=request)
