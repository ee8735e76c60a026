"""The server's protections that sit around every route, wired by :func:`install`:

* :class:`BodyLimit`: a request body larger than the limit is refused with 413 problem+json: at once when its
  ``Content-Length`` says so (nothing is read), otherwise as soon as the streamed bytes pass the limit (the
  handler never sees more). ``max_upload_bytes`` for ``POST /v1/utilization:ingest``, ``max_body_bytes`` else.
* :class:`SecurityHeaders`: ``X-Content-Type-Options: nosniff``, ``Content-Security-Policy`` with
  ``frame-ancestors 'none'`` (and ``X-Frame-Options: DENY`` for old browsers), ``Referrer-Policy: no-referrer``
  on every response, and ``Cache-Control: no-store`` on all but the static assets (tokens, costs and audit data
  must not sit in shared caches).
* The API docs at ``/docs`` with Swagger UI served from the ``swagger-ui-bundle`` package (no CDN, works
  offline); ReDoc (CDN only) is off.
* Database availability: a refused, timed-out or exhausted database is a 503 problem+json with ``Retry-After``
  and one log line without a traceback (:func:`gpufleet.adapters.sql.engine.unavailable_reason`).
* A query parameter a ``/v1`` route does not declare is a 422 problem+json naming it (:func:`refuse_unknown_query`),
  as an unknown body field is: FastAPI drops it otherwise, so ``GET /v1/pools?sku=...`` (the registry's filter is
  ``sku_id``) listed every SKU's pools and ``DELETE /v1/teams/{id}/budget?dry_run=true`` deleted the budget.
* A value the database refuses for its column (``DataError``: a string too long or a number out of range, which
  the request schemas should have refused already) is a 422 problem+json naming the body, never a 500; the SQL
  and the values stay in the server log.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import swagger_ui_bundle  # type: ignore[import-untyped]
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from sqlalchemy import exc as sa_exc
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.adapters.sql.engine import unavailable_reason
from gpufleet.adapters.sql.migrate import DatabaseUnavailable
from gpufleet.api.problems import PROBLEM_MEDIA_TYPE, field_problem, problem
from gpufleet.domain.errors import ValidationError

log = logging.getLogger("gpufleet.api")

RETRY_AFTER_S = 5  # a restarting PostgreSQL or a released lock is usually back within seconds
UPLOAD_PATHS = frozenset({"/v1/utilization:ingest"})
STATIC_PREFIXES = ("/ui/static/", "/docs/static/")
DOCS_STATIC = "/docs/static"
CSP = "frame-ancestors 'none'; object-src 'none'; base-uri 'none'"


_DECLARED_QUERY: dict[int, frozenset[str]] = {}


def _query_names(dependant: Any) -> set[str]:
    """The query parameter names a route's dependant (and its sub-dependencies) declares (a parameter model: its
    fields)."""
    names: set[str] = set()
    for field in dependant.query_params:
        annotation = getattr(field.field_info, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= {f.alias or n for n, f in annotation.model_fields.items()}
        else:
            names.add(field.alias)
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def refuse_unknown_query(request: Request) -> None:
    """An app-wide dependency: a query parameter the matched ``/v1`` route does not declare is a
    :class:`ValidationError` (422) naming it and the parameters the route takes. Other paths (the dashboard's
    ``?token=``, ``/docs``) are left alone. ``async`` so that it runs on the event loop: a sync dependency takes a
    worker thread, and ``/healthz`` must answer while every worker thread waits on a locked database
    (tests/integration/test_hardening_db.py)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.url.path.startswith("/v1/") or not request.query_params:
        return
    known = _DECLARED_QUERY.get(id(route))
    if known is None:
        known = _DECLARED_QUERY[id(route)] = frozenset(_query_names(dependant))
    unknown = sorted(set(request.query_params.keys()) - known)
    if unknown:
        takes = ", ".join(sorted(known)) if known else "none"
        where = getattr(route, "path", request.url.path)
        raise ValidationError(unknown[0], f"unknown query parameter of {request.method} {where} (it takes: {takes})")


class BodyTooLarge(Exception):
    """Raised from ``receive`` when the streamed body passes the limit (the middleware answers 413)."""


def _problem_bytes(status: int, title: str, detail: str, path: str) -> bytes:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "instance": path}
    body |= {"field": "body", "errors": [{"field": "body", "message": detail}]}
    return json.dumps(body).encode()


class BodyLimit:
    """ASGI middleware: refuse request bodies over the limit with 413 (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes

    def limit_for(self, path: str) -> int:
        return self.max_upload_bytes if path in UPLOAD_PATHS else self.max_body_bytes

    async def _refuse(self, scope: Scope, send: Send, limit: int) -> None:
        body = _problem_bytes(413, "Content Too Large", f"request body over {limit} bytes", scope["path"])
        headers = [(b"content-type", PROBLEM_MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]
        headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit:
                    await self._refuse(scope, send, limit)  # refused before a byte of the body is read
                    return
        state = {"read": 0, "over": False, "started": False}

        async def counted() -> Message:
            msg = await receive()
            if msg["type"] == "http.request":
                state["read"] += len(msg.get("body", b""))
                if state["read"] > limit:
                    state["over"] = True
                    raise BodyTooLarge()
            return msg

        async def guarded(msg: Message) -> None:
            if state["over"]:
                return  # the handler's own answer to the interrupted read is replaced by the 413
            if msg["type"] == "http.response.start":
                state["started"] = True
            await send(msg)

        with contextlib.suppress(BodyTooLarge):
            await self.app(scope, counted, guarded)
        if state["over"] and not state["started"]:
            await self._refuse(scope, send, limit)


class SecurityHeaders:
    """ASGI middleware: the security headers of the module docstring on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith(STATIC_PREFIXES)

        async def with_headers(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                headers = [(k, v) for k, v in msg.get("headers", []) if k.lower() != b"cache-control" or static]
                headers += [
                    (b"x-content-type-options", b"nosniff"),
                    (b"content-security-policy", CSP.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                msg = {**msg, "headers": headers}
            await send(msg)

        await self.app(scope, receive, with_headers)


def _install_docs(app: FastAPI) -> None:
    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - docs",
            swagger_js_url=f"{DOCS_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_STATIC}/favicon-32x32.png",
        )


def _install_db_handlers(app: FastAPI) -> None:
    async def unavailable(request: Request, error: Exception) -> JSONResponse:
        reason = str(error) if isinstance(error, DatabaseUnavailable) else unavailable_reason(error)
        if reason is None:  # an OperationalError that is a bug (e.g. SQLite "no such table"): a plain 500
            log.error("database error on %s %s: %r", request.method, request.url.path, error, exc_info=error)
            return problem(500, "internal error; see the server log", request=request)
        log.warning("503 on %s %s: %s", request.method, request.url.path, reason)
        return problem(
            503,
            "the database is unavailable (unreachable, too slow or busy); retry later",
            request=request,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    async def data_error(request: Request, error: Exception) -> JSONResponse:
        # a schema bound wider than its column: worth fixing, but the client's answer is a 422 either way
        log.warning("value refused by the database on %s %s: %s", request.method, request.url.path, error)
        return field_problem(422, "body", "a value does not fit the database (too long or out of range)", request)

    for cls in (sa_exc.OperationalError, sa_exc.TimeoutError, DatabaseUnavailable):
        app.add_exception_handler(cls, unavailable)
    app.add_exception_handler(sa_exc.DataError, data_error)


def install(app: FastAPI, *, max_body_bytes: int, max_upload_bytes: int) -> None:
    """Wire the middlewares (outermost: security headers, then the body limit), the docs and the 503 handlers."""
    _install_docs(app)
    _install_db_handlers(app)
    app.add_middleware(BodyLimit, max_body_bytes=max_body_bytes, max_upload_bytes=max_upload_bytes)
    app.add_middleware(SecurityHeaders)
