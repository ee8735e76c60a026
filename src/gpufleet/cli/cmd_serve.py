"""``gpufleet serve``: run the control-plane API (refuses an unmigrated database)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.service_settings import load_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from gpufleet.service.bootstrap import Services
    from gpufleet.service.settings import Settings


class LogLevel(StrEnum):
    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"
    trace = "trace"


def build_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """The served app: the API (``create_app``: routes, ``/metrics``) plus the FinOps dashboard at ``/ui``, which
    authenticates with the API's bearer tokens. ``api`` and ``web`` are sibling layers, so they meet here."""
    from gpufleet.api.app import create_app
    from gpufleet.web.service_dashboard import mount_service_dashboard

    api = create_app(settings, services=services)
    mount_service_dashboard(api, api.state.services, api.state.finops)
    return api


def register(app: typer.Typer) -> None:
    @app.command("serve")
    @user_errors
    def serve(
        db: Annotated[
            str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL or ./gpufleet.db)")
        ] = None,
        host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1)")] = None,
        port: Annotated[int | None, typer.Option(help="TCP port (default 8000)")] = None,
        log_level: Annotated[LogLevel, typer.Option(help="uvicorn log level")] = LogLevel.info,
    ) -> None:
        """Serve the HTTP API, /metrics and the FinOps dashboard at /ui. Run `gpufleet db upgrade` first; the server refuses an unmigrated database."""
        import uvicorn

        settings = load_settings(db_url=db, host=host, port=port)
        api = build_app(settings)
        uvicorn.run(api, host=settings.host, port=settings.port, log_level=log_level.value, access_log=False)
