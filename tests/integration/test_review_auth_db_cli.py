"""Review (secrets, bad settings): the database URL's password is echoed when it is given as a query parameter,
and ``gpufleet db upgrade`` turns a database refusal during the migration into a traceback.

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli
from tests.integration.conftest import PG_ADMIN_URL

runner = CliRunner()
SECRET = "s3cr3t-Pa55word"
REFUSED = f"postgresql+psycopg://postgres@127.0.0.1:1/test?password={SECRET}"  # port 1: connection refused


@pytest.mark.parametrize("command", [["db", "upgrade"], ["token", "list"], ["serve"]])
def test_a_password_given_as_a_url_query_parameter_is_never_echoed(command: list[str]) -> None:
    """Review (fixed), the defect: errors and messages name the database by
    ``engine.url.render_as_string(hide_password=True)`` (adapters/sql/migrate.py ``DatabaseUnavailable``,
    ``ensure_migrated``; engine.py ``safe_url``), which masks only the ``user:password@`` part. libpq (and SQLAlchemy,
    which passes query arguments to psycopg) also take the password as ``?password=...``; given that way it is printed
    in clear: ``error: cannot open database postgresql+psycopg://postgres@127.0.0.1:1/test?password=s3cr3t-Pa55word:
    connection failed ...`` (and the same text is logged by the API's 503 handler for ``DatabaseUnavailable``).
    Expected: the refusal without the secret."""
    r = runner.invoke(cli, [*command, "--db", REFUSED])
    assert r.exit_code == 2, r.output
    assert "cannot open database" in r.output
    assert SECRET not in r.output, r.output


@pytest.fixture
def pg_reachable(pg_reason: str | None) -> None:
    if pg_reason:
        pytest.skip(pg_reason)


@pytest.fixture
def readonly_login(pg_reachable: None) -> Iterator[str]:
    """A URL of a login that may connect to the test database but may not create anything in its schema."""
    schema, login = f"gft_ro_{secrets.token_hex(4)}", f"gft_ro_login_{secrets.token_hex(4)}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
        conn.execute(text(f'CREATE ROLE "{login}" LOGIN'))
        conn.execute(text(f'GRANT USAGE ON SCHEMA {schema} TO "{login}"'))
    try:
        yield f"postgresql+psycopg://{login}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            conn.execute(text(f'DROP OWNED BY "{login}"'))
            conn.execute(text(f'DROP ROLE "{login}"'))
        admin.dispose()


@pytest.mark.postgres
def test_db_upgrade_without_the_right_to_create_tables_is_one_line_not_a_traceback(readonly_login: str) -> None:
    """Review (fixed), the defect: ``gpufleet db upgrade`` run with a login that may not create tables (e.g. the
    service's own login, which deployments give DML rights only) dies with a ``sqlalchemy.exc.ProgrammingError``
    traceback (``InsufficientPrivilege: permission denied for schema ...``) and exit 1: ``migrate.upgrade`` wraps only
    the revision read (``current_revision``) as ``DatabaseUnavailable``; the DDL of ``command.upgrade`` is not wrapped
    and ``user_errors`` lets it through. Expected: one ``error: ...`` line saying the database refused the migration
    (and why), exit 2, no traceback."""
    r = runner.invoke(cli, ["db", "upgrade", "--db", readonly_login])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)[:300]
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "Traceback" not in r.output


@pytest.mark.postgres
def test_db_upgrade_into_a_schema_that_does_not_exist_is_one_line_not_a_traceback(pg_reachable: None) -> None:
    """Defect (same place): a URL whose ``search_path`` names a schema that does not exist (a typo) makes ``gpufleet
    db upgrade`` die with ``ProgrammingError: (psycopg.errors.InvalidSchemaName) no schema has been selected to create
    in`` and a traceback, exit 1. Expected: one ``error:`` line, exit 2."""
    missing = f"gft_missing_{secrets.token_hex(4)}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{missing}"
    r = runner.invoke(cli, ["db", "upgrade", "--db", url])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)[:300]
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "Traceback" not in r.output
