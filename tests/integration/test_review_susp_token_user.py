"""Review (susp): the user and team ids a token is issued for (``gpufleet token create``, service/auth.py
``issue_token``): names that print as another name, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli

runner = CliRunner()
# a zero-width space, a right-to-left override, a BOM, an escape sequence, a newline, a NUL
UNSEEN = ["bob\u200b", "\u202eboj", "\ufeffbob", "bob\x1b[2K", "bob\nroot", "bob\x00"]


@pytest.mark.parametrize("name", UNSEEN)
@pytest.mark.parametrize("option", ["--user", "--team"])
def test_token_create_refuses_ids_with_control_or_invisible_characters(tmp_path: Path, name: str, option: str) -> None:
    """Review (fixed), the defect: ``token create --user 'bob<U+200B>'`` (or with an escape sequence, a newline, a
    right-to-left override) issued a token whose user id lists, audits and prints as ``bob`` (or rewrites the
    terminal line), a second identity that reads as another person's; the audit log and ``token list`` then show
    actions under a name nobody can tell apart. Expected: refused at creation, exit 2, naming the field."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert runner.invoke(cli, ["db", "upgrade", "--db", url]).exit_code == 0
    args = ["--role", "app_team", "--team", "team-a", "--user", "ann"]
    args[args.index(option) + 1] = name
    r = runner.invoke(cli, ["token", "create", *args, "--db", url])
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and option.removeprefix("--") in r.output
    listed = runner.invoke(cli, ["token", "list", "--db", url])
    assert "0 tokens" in listed.output, listed.output
