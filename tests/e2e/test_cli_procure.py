"""The procurement commands end to end: bench procure, plan, bad input -> one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()


def _series_csv(path: Path, sid: str = "h100_80gb@us-east-1", hours: int = 24 * 12) -> Path:
    rng = np.random.default_rng(0)
    t = np.arange(hours * 6)  # 10-minute samples
    v = 200 + 60 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 5, len(t))
    lines = ["timestamp,series_id,value"]
    for i, x in enumerate(v):
        day, rem = divmod(i * 600, 86400)
        hh, rem = divmod(rem, 3600)
        lines.append(f"2024-01-{day + 1:02d}T{hh:02d}:{rem // 60:02d}:00Z,{sid},{x:.2f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bench_procure_writes_every_policy_with_ratios(tmp_path: Path) -> None:
    csv = _series_csv(tmp_path / "d.csv")
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["bench", "procure", "--demand", str(csv), "--term-hours", "72", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    rows = doc["series"]["h100_80gb@us-east-1"]
    assert set(rows) == {
        "gpufleet",
        "all_on_demand",
        "reserve_peak",
        "lookback_p50",
        "online_breakeven",
        "hindsight_optimal",
    }
    assert rows["hindsight_optimal"]["ratio_to_optimal"] == 1.0
    assert all(r["ratio_to_optimal"] >= 1.0 - 1e-9 for r in rows.values())


def test_bench_procure_bad_file_is_one_line_exit_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["bench", "procure", "--demand", str(tmp_path / "missing.csv")])
    assert res.exit_code == 2
    assert "Traceback" not in res.output


def test_plan_from_history_writes_proposals_and_quota_outlook(tmp_path: Path) -> None:
    csv = _series_csv(tmp_path / "h.csv")
    out = tmp_path / "plan.json"
    res = runner.invoke(
        app, ["plan", "--history", str(csv), "--horizon", "120d", "--on-demand-quota", "150", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["proposals"] and all(p["submit_by_s"] <= p["start_s"] for p in doc["proposals"])
    assert doc["quotas"][0]["reason"] in {"exhausted", "overdue", "request_now", "on_track"}


def test_plan_rejects_a_bad_horizon() -> None:
    res = runner.invoke(app, ["plan", "--horizon", "half a year"])
    assert res.exit_code == 2
