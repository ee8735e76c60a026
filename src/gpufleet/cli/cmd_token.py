"""``gpufleet token create | list | revoke``: bearer API tokens (printed once at creation; only hashes are stored)."""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from gpufleet.cli.errors import user_errors
from gpufleet.cli.service_settings import load_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

_err = Console(stderr=True, markup=False)  # user and team names are text, never Rich markup


@contextmanager
def _store(db: str | None) -> Iterator[Engine]:
    """The configured database, refused (with the fix printed) unless it is migrated; disposed afterwards."""
    from gpufleet.adapters.sql.engine import make_engine, safe_url
    from gpufleet.adapters.sql.migrate import ensure_migrated

    engine = make_engine(load_settings(db_url=db).db_url)
    try:
        ensure_migrated(engine, safe_url=safe_url(engine))
        yield engine
    finally:
        engine.dispose()


def register(app: typer.Typer) -> None:
    token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
    app.add_typer(token_app, name="token")

    @token_app.command("create")
    @user_errors
    def create(
        role: Annotated[str, typer.Option(help="finops_admin | ml_platform_admin | app_team | viewer")],
        team: Annotated[str | None, typer.Option(help="Team id (required for app_team)")] = None,
        user: Annotated[str | None, typer.Option(help="User id the token acts as (default: your login)")] = None,
        ttl: Annotated[str, typer.Option(help="Lifetime: <n>m|h|d|w (e.g. 30d), or 'never' (no expiry)")] = "90d",
        db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL)")] = None,
    ) -> None:
        """Create a token and print it on stdout (alone, so `TOKEN=$(gpufleet token create ...)` works)."""
        from gpufleet.service.auth import check_name, issue_token, parse_ttl, team_exists, utc_iso
        from gpufleet.service.clock import RandomIds, SystemClock

        ttl_s = parse_ttl(ttl)  # bad input fails before touching the database
        user = user or getpass.getuser()
        check_name("user", user)
        if team is not None:
            check_name("team", team)
        with _store(db) as engine:
            if team and not team_exists(engine, team):
                _err.print(
                    f"warning: team {team!r} does not exist (yet); the server refuses this token (403) until an "
                    "admin creates it with POST /v1/teams",
                    highlight=False,
                )
            issued = issue_token(
                engine,
                SystemClock(),
                RandomIds(),
                role=role,
                user_id=user,
                team_id=team,
                ttl_s=ttl_s,
            )
        expiry = "never expires" if issued.expires_at_s is None else f"expires {utc_iso(issued.expires_at_s)}"
        _err.print(
            f"created {issued.token_id} (role {role}{', team ' + team if team else ''}; {expiry}); store it now:",
            highlight=False,
        )
        typer.echo(issued.token)

    @token_app.command("list")
    @user_errors
    def list_(
        db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL)")] = None,
    ) -> None:
        """List tokens (id, user, role, team, created, expires, status); never the secrets."""
        from rich.table import Table

        from gpufleet.service.auth import list_tokens, utc_iso
        from gpufleet.service.clock import SystemClock

        with _store(db) as engine:
            tokens = list_tokens(engine)
        now_s = SystemClock().now_s()
        table = Table("id", "user", "role", "team", "created", "expires", "status", title=f"{len(tokens)} tokens")
        for t in tokens:
            expires = "never" if t.expires_at_s is None else utc_iso(t.expires_at_s)
            table.add_row(
                t.token_id, t.user_id, t.role, t.team_id or "-", utc_iso(t.created_at_s), expires, t.status(now_s)
            )
        Console(width=140, markup=False).print(table)

    @token_app.command("revoke")
    @user_errors
    def revoke(
        token_id: Annotated[str, typer.Argument(help="Token id (tok_...), as printed by `token create`")],
        db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL)")] = None,
    ) -> None:
        """Revoke a token; servers stop accepting it within GPUFLEET_TOKEN_CACHE_S seconds."""
        from gpufleet.service.auth import revoke_token
        from gpufleet.service.clock import SystemClock

        with _store(db) as engine:
            revoke_token(engine, SystemClock(), token_id)
        _err.print(f"revoked {token_id}", highlight=False)
