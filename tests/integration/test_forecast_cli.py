"""The forecast commands end to end on small generated files (no shared data needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app


def _write_series(path: Path, step: timedelta, n: int, gaps: bool = False) -> None:
    rng = np.random.default_rng(0)
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = ["timestamp,series_id,value"]
    for sid, level in (("svc-a", 100.0), ("svc-b", 40.0)):
        for i in range(n):
            v = level * (1 + 0.3 * np.sin(2 * np.pi * i * step.total_seconds() / 86_400)) + rng.normal(0, 2)
            if gaps and 30 <= i < 36:
                v = 0.0 if sid == "svc-a" else float("nan")
            if gaps and i == 50:
                continue  # a missing row
            text = "" if np.isnan(v) else f"{v:.3f}"
            rows.append(f"{(t0 + i * step).isoformat().replace('+00:00', 'Z')},{sid},{text}")
    path.write_text("\n".join(rows) + "\n")


def test_bench_forecast_writes_the_issue_json_shape(tmp_path: Path) -> None:
    csv = tmp_path / "s.csv"
    _write_series(csv, timedelta(hours=1), 24 * 12, gaps=True)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        ["bench", "forecast", "--series", str(csv), "--horizon", "1d", "--json", str(out),
         "--models", "gpufleet,naive,seasonal_naive"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert set(data) == {"series"}
    assert set(data["series"]) == {"svc-a", "svc-b"}
    for per_model in data["series"].values():
        assert set(per_model) == {"gpufleet", "naive", "seasonal_naive"}
        for m in per_model.values():
            assert set(m) == {"mase", "pinball", "coverage_80", "seconds"}
            assert np.isfinite(m["mase"]) and 0 <= m["coverage_80"] <= 1
    assert "pinball / best baseline" in res.output


def test_forecast_command_prints_and_writes_quantiles(tmp_path: Path) -> None:
    csv = tmp_path / "s.csv"
    _write_series(csv, timedelta(days=1), 60)
    out = tmp_path / "f.json"
    res = CliRunner().invoke(app, ["forecast", "--series", str(csv), "--horizon", "7d", "--json", str(out)])
    assert res.exit_code == 0, res.output
    body = json.loads(out.read_text())["series"]["svc-a"]
    assert len(body["timestamps"]) == 7 and body["timestamps"][0] == "2024-03-01T00:00:00Z"
    p10, p50, p90 = (np.array(body["quantiles"][k]) for k in ("0.1", "0.5", "0.9"))
    assert np.all(p10 <= p50) and np.all(p50 <= p90)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["forecast", "--series", "/nonexistent.csv", "--horizon", "7d"], "does not exist"),
        (["bench", "forecast", "--series", "/nonexistent.csv", "--horizon", "1d"], "does not exist"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    assert needle in res.output


def test_bad_horizon_is_a_clear_error(tmp_path: Path) -> None:
    csv = tmp_path / "s.csv"
    _write_series(csv, timedelta(days=1), 20)
    res = CliRunner().invoke(app, ["forecast", "--series", str(csv), "--horizon", "soon"])
    assert res.exit_code == 2 and "duration" in res.output


def test_forecast_scale_bench_runs_small() -> None:
    res = CliRunner().invoke(app, ["bench", "forecast-scale", "--n-series", "20", "--horizon", "30"])
    assert res.exit_code == 0, res.output
    assert "20 series x 60 points" in res.output
