"""``gpufleet bench autoscale`` from the command line: JSON output and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app


def test_bench_autoscale_writes_the_issue_json(tmp_path: Path) -> None:
    p = tmp_path / "rates.csv"
    rows = ["timestamp,series_id,value"] + [f"2024-01-01T00:{m:02d}:00Z,only,{5 + m % 3}" for m in range(0, 60, 10)]
    p.write_text("\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["bench", "autoscale", "--trace", str(p), "--cold-start-s", "30", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["trace"] == "rates.csv:only"
    assert set(data["policies"]) == {"gpufleet", "static_peak", "hpa", "kpa"}


def test_bench_autoscale_bad_file_is_one_line_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bench", "autoscale", "--trace", str(tmp_path / "missing.csv")])
    assert res.exit_code == 2
