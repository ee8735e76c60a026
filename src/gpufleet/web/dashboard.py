"""Mount the FinOps dashboard on a FastAPI app: ``mount_dashboard(app, data_provider, viewer=...)``.

Routes under ``prefix`` (default ``/ui``): the pages (``/ui/overview`` ...), ``/ui/static/*`` (JS, CSS and the
vendored Chart.js: no CDN, works offline) and the JSON the pages read, ``/ui/api/*``. Every JSON route depends on
``viewer``, a FastAPI dependency that authenticates the request and returns the caller's :class:`Scope` (the
service passes the same bearer-token dependency as its API, so an app team sees only its own team). The default
viewer grants the fleet scope to anyone: for a local demo only.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the route signatures' real ``Annotated`` types,
# and ``ViewerDep`` is local to ``mount_dashboard``.
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from gpufleet.domain.errors import ValidationError
from gpufleet.web.data import DashboardData, Scope

PAGES: dict[str, str] = {
    "overview": "Fleet overview",
    "breakdown": "By team, tenant, feature",
    "reservations": "Reservations",
    "forecast": "Forecast vs actual",
    "opportunities": "Rightsizing & idle",
}


# The pages load only their own files (two scripts, one stylesheet) and fetch their JSON from the same server: any
# other script (inline, an event handler attribute, another origin) is refused, so markup that reached a page by
# mistake could not run script and read the token in sessionStorage. The served app adds its own headers too (a
# browser enforces every policy it is sent).
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _fleet_scope() -> Scope:
    return Scope(None)


def _page_html(prefix: str, page: str) -> str:
    template = resources.files("gpufleet.web").joinpath("static/page.html").read_text()
    nav = "".join(
        f'<a href="{prefix}/{name}"{" class=active" if name == page else ""}>{title}</a>'
        for name, title in PAGES.items()
    )
    return (
        template.replace("{{prefix}}", prefix)
        .replace("{{page}}", page)
        .replace("{{title}}", PAGES[page])
        .replace("{{nav}}", nav)
    )


def mount_dashboard(
    app: FastAPI,
    data_provider: DashboardData,
    *,
    prefix: str = "/ui",
    viewer: Callable[..., Scope] = _fleet_scope,
) -> None:
    """Add the dashboard's pages, static files and JSON routes to ``app``."""
    prefix = "/" + prefix.strip("/")
    ViewerDep = Annotated[Scope, Depends(viewer)]  # noqa: N806 - a type alias, named like one
    router = APIRouter(prefix=prefix)

    def guard(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ValidationError as exc:
            raise HTTPException(422, detail={"field": exc.field, "message": exc.message}) from None

    @router.get("", include_in_schema=False)
    @router.get("/", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse(f"{prefix}/overview")

    @router.get("/api/overview")
    def overview(scope: ViewerDep) -> Any:
        return guard(lambda: data_provider.overview(scope))

    @router.get("/api/breakdown")
    def breakdown(scope: ViewerDep, dim: Annotated[str, Query()] = "team") -> Any:
        return guard(lambda: data_provider.breakdown(dim, scope))

    @router.get("/api/breakdown.csv", response_class=PlainTextResponse)
    def breakdown_csv(scope: ViewerDep, dim: Annotated[str, Query()] = "team") -> PlainTextResponse:
        text = guard(lambda: data_provider.breakdown_csv(dim, scope))
        return PlainTextResponse(
            text, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="showback-{dim}.csv"'}
        )

    @router.get("/api/reservations")
    def reservations(scope: ViewerDep) -> Any:
        return guard(lambda: data_provider.reservations(scope))

    @router.get("/api/forecast")
    def forecast(scope: ViewerDep) -> Any:
        return guard(lambda: data_provider.forecast(scope))

    @router.get("/api/opportunities")
    def opportunities(scope: ViewerDep) -> Any:
        return guard(lambda: data_provider.opportunities(scope))

    @router.get("/{page}", response_class=HTMLResponse, include_in_schema=False)
    def page(page: str) -> HTMLResponse:
        if page not in PAGES:
            raise HTTPException(404, detail=f"no dashboard page {page!r}")
        return HTMLResponse(_page_html(prefix, page), headers={"Content-Security-Policy": PAGE_CSP})

    static_dir = resources.files("gpufleet.web").joinpath("static")
    app.mount(f"{prefix}/static", StaticFiles(directory=str(static_dir)), name="gpufleet-dashboard-static")
    app.include_router(router)
