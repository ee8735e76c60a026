"""``gpufleet db upgrade``: apply the schema migrations shipped inside the package."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.service_settings import load_settings


def register(app: typer.Typer) -> None:
    db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
    app.add_typer(db_app, name="db")

    @db_app.command("upgrade")
    @user_errors
    def upgrade(
        db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL)")] = None,
        revision: Annotated[str, typer.Option(help="Target revision")] = "head",
    ) -> None:
        """Create or upgrade the schema (idempotent) and seed the built-in catalog on first run."""
        from gpufleet.adapters.sql import migrate
        from gpufleet.adapters.sql.engine import make_engine, safe_url

        settings = load_settings(db_url=db)
        engine = make_engine(settings.db_url)
        roles: tuple[str, str] | None = None
        try:
            before, after = migrate.upgrade(engine, revision)
            if engine.dialect.name == "postgresql":
                from gpufleet.adapters.sql.roles import store_role_names

                with engine.connect() as conn:
                    roles = store_role_names(conn)
        finally:
            engine.dispose()
        typer.echo(f"{safe_url(engine)}: schema {before or '(empty)'} -> {after}")
        if roles is not None:
            typer.echo(
                f"audit log owner role: {roles[0]}; serve as a login in the service role: "
                f'GRANT "{roles[1]}" TO <login> (docs/service.md, deployment)'
            )
