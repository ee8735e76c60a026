"""``gpufleet serve``: run the control-plane API (refuses an unmigrated database)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.service_settings import load_settings


def register(app: typer.Typer) -> None:
    @app.command("serve")
    @user_errors
    def serve(
        db: Annotated[
            str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL or ./gpufleet.db)")
        ] = None,
        host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1)")] = None,
        port: Annotated[int | None, typer.Option(help="TCP port (default 8000)")] = None,
        log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    ) -> None:
        """Serve the HTTP API, /metrics and the FinOps dashboard at /ui. Run `gpufleet db upgrade` first; the server refuses an unmigrated database."""
        import uvicorn

        from gpufleet.api.app import create_app
        from gpufleet.web.service_dashboard import mount_service_dashboard

        settings = load_settings(db_url=db, host=host, port=port)
        api = create_app(settings)
        mount_service_dashboard(api, api.state.services, api.state.finops)  # the FinOps dashboard at /ui
        uvicorn.run(api, host=settings.host, port=settings.port, log_level=log_level, access_log=False)
