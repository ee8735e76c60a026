"""The store (migrations match the models, the audit log is append-only, tokens are stored hashed), the
settings that refuse unsafe values, and the service CLI commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from typer.testing import CliRunner

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.migrate import DatabaseNotMigrated
from gpufleet.adapters.sql.models import Base
from gpufleet.api.app import create_app
from gpufleet.cli.main import app as cli
from gpufleet.service.auth import revoke_token
from gpufleet.service.settings import Settings
from tests.integration.conftest import Database, ServerFactory


def test_migrations_produce_exactly_the_models(database: Database) -> None:
    with database.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diffs == []


def test_audit_log_refuses_update_and_delete(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database)
    with server.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/teams", json={"id": "t1", "name": "one"}).status_code == 201
    for stmt in ("UPDATE audit_events SET actor = 'mallory'", "DELETE FROM audit_events"):
        with pytest.raises(DBAPIError, match="append-only"), database.engine.begin() as conn:
            conn.execute(text(stmt))
    with database.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM audit_events WHERE actor = 'bob'")).scalar_one() >= 1


def test_tokens_are_stored_only_as_hashes(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database)
    token = server.token("viewer", "vic")
    with database.engine.connect() as conn:
        stored = [tuple(r) for r in conn.execute(text("SELECT * FROM api_tokens"))]
    assert stored and all(token not in str(v) for row in stored for v in row)
    with server.client("viewer", "vic") as c:
        assert c.get("/v1/skus").status_code == 200
        with database.engine.connect() as conn:
            token_id = conn.execute(text("SELECT id FROM api_tokens WHERE user_id = 'vic'")).scalar_one()
        revoke_token(database.engine, server.services.clock, token_id)
        assert c.get("/v1/skus").status_code == 401  # the test server caches nothing (token_cache_s=0)


def test_server_refuses_an_unmigrated_database_and_says_how_to_fix_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(DatabaseNotMigrated, match="gpufleet db upgrade"):
        create_app(Settings(db_url=url))


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"db_url": "sqlite:///:memory:"}, "db_url"),
        ({"db_url": "mysql://x/y"}, "db_url"),
        ({"host": "0.0.0.0"}, "host"),
        ({"approval_threshold_usd": "-1"}, "approval_threshold_usd"),
        ({"provider_max_attempts": "0"}, "provider_max_attempts"),
        ({"port": "70000"}, "port"),
    ],
)
def test_settings_refuse_unsafe_values(env: dict[str, str], field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(f"GPUFLEET_{key.upper()}", value)
    with pytest.raises(PydanticValidationError) as exc:
        Settings()
    assert field in str(exc.value) or "host" in str(exc.value)


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_APPROVAL_THRESHOLD_USD", "2500")
    monkeypatch.setenv("GPUFLEET_HOST", "0.0.0.0")
    monkeypatch.setenv("GPUFLEET_ALLOW_PUBLIC_BIND", "true")
    s = Settings()
    assert str(s.approval_threshold_usd) == "2500" and s.host == "0.0.0.0"


def test_cli_db_upgrade_token_create_and_serve_refusal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    refused = runner.invoke(cli, ["serve", "--db", url])
    assert refused.exit_code == 2 and "gpufleet db upgrade" in refused.output
    up = runner.invoke(cli, ["db", "upgrade", "--db", url])
    assert up.exit_code == 0 and "0021_placement_admission_release" in up.output
    assert runner.invoke(cli, ["db", "upgrade", "--db", url]).exit_code == 0  # idempotent
    made = runner.invoke(
        cli, ["token", "create", "--role", "app_team", "--team", "team-a", "--user", "ann", "--db", url]
    )
    assert made.exit_code == 0 and made.stdout.strip().splitlines()[-1].startswith("gft_")
    bad = runner.invoke(cli, ["token", "create", "--role", "root", "--db", url])
    assert bad.exit_code == 2 and "role" in bad.output
    engine = make_engine(url)
    with engine.connect() as conn:
        token_id, role, team = conn.execute(text("SELECT id, role, team_id FROM api_tokens")).one()
    assert (role, team) == ("app_team", "team-a")
    assert runner.invoke(cli, ["token", "revoke", token_id, "--db", url]).exit_code == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT revoked FROM api_tokens")).scalar_one() in (True, 1)
    assert runner.invoke(cli, ["token", "revoke", "tok_nope", "--db", url]).exit_code == 2
    engine.dispose()
