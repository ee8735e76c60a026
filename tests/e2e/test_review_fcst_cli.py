"""Review (fcst): bad rows in the demand files of ``gpufleet plan`` and ``gpufleet forecast`` are refused with
their file and line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
HEADER = "timestamp,series_id,value\n"


def test_plan_names_the_line_of_a_negative_demand(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``gpufleet plan --history`` refused a negative GPU demand without its line
    (``FILE: value: series ... has negative GPU demand``), where every other bad row of the file is named by line."""
    f = tmp_path / "demand.csv"
    rows = [f"2026-01-01T{h:02d}:00:00Z,h100_80gb@us-east-1,{-2 if h == 5 else 10}\n" for h in range(24)]
    f.write_text(HEADER + "".join(rows))
    res = runner.invoke(app, ["plan", "--history", str(f), "--horizon", "30d"])
    assert res.exit_code == 2, res.output
    assert f"{f}:7" in res.output and "value" in res.output, res.output
    assert "Traceback" not in res.output
