"""Review (migrate): ``gpufleet db upgrade --revision`` with a relative revision, as a user types it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli

runner = CliRunner()


@pytest.mark.parametrize("revision", ["-1", "-3"])
def test_db_upgrade_to_a_relative_revision_is_one_line_not_a_traceback(tmp_path: Path, revision: str) -> None:
    """Review (fixed), the defect: ``--revision -1`` passed ``migrate.upgrade``'s check (alembic resolves a relative revision
    without the database), then ``command.upgrade`` raised ``CommandError: Relative revision -1 didn't produce 1
    migrations``, which nothing caught: a traceback and exit 1. Expected: one ``error:`` line naming the revision,
    exit 2, and the store left as it was."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    up = runner.invoke(cli, ["db", "upgrade", "--db", url])
    assert up.exit_code == 0, up.output
    with sqlite3.connect(tmp_path / "store.db") as conn:
        before = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    r = runner.invoke(cli, ["db", "upgrade", "--db", url, f"--revision={revision}"])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "revision" in r.output and "Traceback" not in r.output
    with sqlite3.connect(tmp_path / "store.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == before
