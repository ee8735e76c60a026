"""The main job as a user runs it: `gpufleet simulate`, through a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CLI = [sys.executable, "-m", "gpufleet.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def test_simulate_writes_json_and_report_and_is_deterministic(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    r1 = run("simulate", "--days", "5", "--seed", "3", "--json", str(a), "--report", str(tmp_path / "r.html"))
    assert r1.returncode == 0, r1.stderr
    assert "total cost" in r1.stdout
    run("simulate", "--days", "5", "--seed", "3", "--json", str(b))
    run("simulate", "--days", "5", "--seed", "4", "--json", str(c))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    data = json.loads(a.read_text())
    assert data["schema"] == "gpufleet.comparison/1" and data["days"] == 5 and data["primary"] == "gpufleet"
    assert set(data["loops"]) >= {"gpufleet", "baseline"}
    assert all(s["cost_conserved"] is True for s in data["loops"].values())
    assert "What gpufleet changed" in r1.stdout
    html = (tmp_path / "r.html").read_text()
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_an_unknown_loop_is_a_clear_error() -> None:
    r = run("simulate", "--days", "2", "--loops", "gpufleet,nope")
    assert r.returncode == 2
    assert "--loops" in r.stderr and "'nope'" in r.stderr and "Traceback" not in r.stderr


def test_a_broken_scenario_file_names_the_field_and_exits_nonzero_without_traceback(tmp_path: Path) -> None:
    dumped = run("simulate", "--dump")
    assert dumped.returncode == 0
    data = yaml.safe_load(dumped.stdout)
    data["experiments"][0]["jobs_per_day"] = "many"
    p = tmp_path / "broken.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    r = run("simulate", "--scenario", str(p), "--days", "2")
    assert r.returncode == 2
    assert "experiments[0].jobs_per_day" in r.stderr
    assert str(p) in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_a_missing_scenario_file_is_a_clear_error(tmp_path: Path) -> None:
    r = run("simulate", "--scenario", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2
    assert "does not exist" in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_cluster_autoscale_runs_both_scalers_on_the_same_world(tmp_path: Path) -> None:
    out = tmp_path / "ca.json"
    r = run("bench", "cluster-autoscale", "--seeds", "3", "--days", "3", "--gpus", "128", "--json", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    row = data["rows"][0]
    assert set(row) == {"seed", "gpufleet", "ca_like"}
    for name in ("gpufleet", "ca_like"):
        assert row[name]["node_launches"] >= 0 and row[name]["total_cost_usd"] > 0
    g, b = row["gpufleet"], row["ca_like"]
    by_hand = (g["total_cost_usd"] / g["allocated_gpu_hours"]) / (b["total_cost_usd"] / b["allocated_gpu_hours"])
    assert data["cost_per_gpu_hour_ratio_mean"] == pytest.approx(by_hand, abs=1e-4)
    assert "cost per allocated GPU-hour" in " ".join(r.stdout.split())


def test_bench_seeds_are_parsed_strictly() -> None:
    r = run("bench", "loop", "--seeds", "5-2")
    assert r.returncode == 2
    assert "--seeds" in r.stderr and "Traceback" not in r.stderr


def test_python_dash_m_gpufleet_is_the_same_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gpufleet", "bench", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "cluster-autoscale" in out.stdout and "Traceback" not in out.stderr
