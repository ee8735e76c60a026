"""Review (auth/settings/start-up): the store's start-up and upgrade checks, and the token CLI, fail in ways the
promises exclude: a database from a newer gpufleet, an in-memory SQLite URL that slips past the settings check,
and user or team names that the token commands print as Rich markup.

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError as PydanticValidationError
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli
from gpufleet.service.settings import Settings

runner = CliRunner()
FUTURE = "0099_from_a_newer_gpufleet"


def _migrated(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    up = runner.invoke(cli, ["db", "upgrade", "--db", url])
    assert up.exit_code == 0, up.output
    return url


def _stamp_future(url: str) -> None:
    """The database as a newer gpufleet left it: its schema revision is one this gpufleet does not ship."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (FUTURE,))


def test_db_upgrade_on_a_database_from_a_newer_version_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``gpufleet db upgrade`` on a database whose revision this gpufleet does not know
    (written by a newer release) dies with alembic's ``CommandError: Can't locate revision identified by ...`` traceback
    and exit 1: ``migrate.upgrade`` only checks the *target* revision (adapters/sql/migrate.py ``upgrade``), never the
    database's current one, and ``command.upgrade`` raises ``CommandError`` that ``user_errors`` does not catch.
    Expected: refused with one ``error: ...`` line naming the unknown revision, exit 2, no traceback."""
    url = _migrated(tmp_path)
    _stamp_future(url)
    r = runner.invoke(cli, ["db", "upgrade", "--db", url])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and FUTURE in r.output and "Traceback" not in r.output


def test_serving_a_database_from_a_newer_version_does_not_advise_a_downgrade_by_db_upgrade(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``gpufleet serve`` (and every command that checks the schema) on a database from a
    newer gpufleet says ``... is at revision 0099_... but this gpufleet needs revision 0012_...; run: gpufleet db
    upgrade`` (adapters/sql/migrate.py ``ensure_migrated``): it treats "newer" like "older", and the command it prints
    cannot fix it (it crashes, see the test above). Expected: a clear refusal that the database is from a newer
    (unknown) revision, which this gpufleet cannot serve -- not the advice to run ``db upgrade``."""
    url = _migrated(tmp_path)
    _stamp_future(url)
    r = runner.invoke(cli, ["serve", "--db", url])
    assert r.exit_code == 2, r.output
    assert FUTURE in r.output
    assert "db upgrade" not in r.output, r.output


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite:///:memory:?cache=shared"])
def test_settings_refuse_every_in_memory_sqlite_url(url: str) -> None:
    """Review (fixed), the defect: the settings promise to refuse in-memory SQLite ("loses every reservation on
    restart", docs/service.md, Settings), but ``_db_url_is_supported`` (service/settings.py) only looks for a URL ending
    in ``:memory:`` or ``://``. ``sqlite:///`` (no path: SQLAlchemy opens ``:memory:``) and
    ``sqlite:///:memory:?cache=shared`` (a query after it) pass. Expected: a pydantic ValidationError naming db_url, as
    for ``sqlite:///:memory:``."""
    with pytest.raises(PydanticValidationError, match="db_url"):
        Settings(db_url=url)


def test_db_upgrade_of_an_in_memory_url_does_not_report_success() -> None:
    """Review (fixed), the defect (same check): ``gpufleet db upgrade --db sqlite:///`` migrates a throw-away in-memory
    database and prints ``sqlite:///: schema (empty) -> 0012_...`` with exit 0, so the operator believes the store
    exists; nothing was written anywhere. Expected: one ``error: db_url: ...`` line and exit 2."""
    r = runner.invoke(cli, ["db", "upgrade", "--db", "sqlite:///"])
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "db_url" in r.output


def test_token_list_survives_a_user_name_with_brackets(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``gpufleet token list`` puts user ids into a Rich table unescaped (cli/cmd_token.py,
    ``table.add_row( t.token_id, t.user_id, ...)``). ``token create --user`` accepts any 1..128 characters, so one token
    made for ``eve[/]`` makes every later ``token list`` die with ``rich.errors.MarkupError`` (a traceback; operators
    can no longer list tokens to find expired or unexpiring ones), and ``[bold]root`` is shown as ``root``. Expected:
    the names printed as text, exit 0."""
    url = _migrated(tmp_path)
    for user in ("eve[/]", "[bold]root"):
        made = runner.invoke(cli, ["token", "create", "--role", "viewer", "--user", user, "--db", url])
        assert made.exit_code == 0, made.output
    r = runner.invoke(cli, ["token", "list", "--db", url])
    assert r.exception is None, repr(r.exception)
    assert r.exit_code == 0, r.output
    assert "eve[/]" in r.output and "[bold]root" in r.output


def test_token_create_with_a_bracketed_team_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``gpufleet token create --role app_team --team 'x[/]'`` prints its "team does not
    exist" warning (and later the "created ..." line) with Rich markup on (cli/cmd_token.py, ``_err.print(f"warning:
    team {team!r} ...")``), so the bracket raises ``rich.errors.MarkupError``: a traceback and exit 1 instead of the
    warning. (Had the warning passed, the same markup in the "created" line would crash after the token was committed,
    and its secret would never be shown.) Expected: no traceback; the warning printed as text (or the team refused with
    one ``error:`` line, exit 2)."""
    url = _migrated(tmp_path)
    r = runner.invoke(cli, ["token", "create", "--role", "app_team", "--team", "x[/]", "--user", "ann", "--db", url])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 2), r.output
