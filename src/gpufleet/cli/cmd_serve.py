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


class ProviderChoice(StrEnum):
    simulated = "simulated"
    aws = "aws"
    gcp = "gcp"
    azure = "azure"


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


def _dry_run(settings: Settings) -> None:
    """Print each AWS call the server's startup would make (validated, never sent); no database writes."""
    from gpufleet.domain.errors import ValidationError
    from gpufleet.service.bootstrap import build_services
    from gpufleet.service.dry_run import dry_run_startup

    if settings.provider != "aws":
        raise ValidationError("--dry-run", "needs --provider aws (the simulated provider makes no external calls)")
    services = build_services(settings, on_dry_run=lambda call: typer.echo(f"DRY-RUN {call.line()}"))
    n = dry_run_startup(services)
    services.engine.dispose()
    typer.echo(f"dry run: {n} AWS calls printed, none sent; nothing written to {settings.db_url.split('://')[0]}")


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
        provider: Annotated[
            ProviderChoice | None,
            typer.Option(help="Where reservations are bought (default: GPUFLEET_PROVIDER or simulated)"),
        ] = None,
        dry_run: Annotated[
            bool,
            typer.Option(
                "--dry-run", help="With --provider aws: print the AWS calls startup would make, send none, exit"
            ),
        ] = False,
    ) -> None:
        """Serve the HTTP API, /metrics and the FinOps dashboard at /ui. Run `gpufleet db upgrade` first; the server refuses an unmigrated database."""
        import uvicorn

        settings = load_settings(
            db_url=db,
            host=host,
            port=port,
            provider=None if provider is None else provider.value,
            aws_dry_run=True if dry_run else None,
        )
        if dry_run:
            _dry_run(settings)
            return
        api = build_app(settings)
        uvicorn.run(api, host=settings.host, port=settings.port, log_level=log_level.value, access_log=False)
