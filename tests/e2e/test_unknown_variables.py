"""A GPUFLEET_* variable that names no setting is warned about, not silently ignored (a misspelled DB URL would
otherwise run the service on its default database)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.service_settings import unknown_variables


def test_only_names_that_are_no_setting_are_listed() -> None:
    env = {"GPUFLEET_DB_URL": "x", "GPUFLEET_NATIVE": "0", "GPUFLEET_DB_ULR": "x", "HOME": "/root"}
    assert unknown_variables(env) == ["GPUFLEET_DB_ULR"]


def test_the_cli_warns_about_a_misspelled_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_DB_ULR", f"sqlite:///{tmp_path / 'meant.db'}")
    res = CliRunner().invoke(app, ["db", "upgrade", "--db", f"sqlite:///{tmp_path / 'g.db'}"])
    assert res.exit_code == 0, res.output
    assert "GPUFLEET_DB_ULR is not a gpufleet setting" in res.output
