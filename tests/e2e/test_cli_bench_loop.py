"""`gpufleet bench loop` as a user runs it: every loop per seed, means with spread, JSON, scenario by name or file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "gpufleet.cli.main"]
REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, check=False)


def test_bench_loop_prints_every_loop_and_writes_the_means(tmp_path: Path) -> None:
    out = tmp_path / "loop.json"
    r = run("bench", "loop", "--seeds", "1-2", "--days", "4", "--json", str(out))
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for name in ("gpufleet", "common_practice", "baseline", "hindsight bound"):
        assert name in text
    assert "seed 1:" in text and "seed 2:" in text
    data = json.loads(out.read_text())
    assert data["seeds"] == [1, 2] and data["scenario"] == "default" and data["days"] == 4
    assert set(data["loops"]) == {"gpufleet", "common_practice", "baseline"}
    for name, e in data["loops"].items():
        for key in ("cost_usd_mean", "p95_queue_wait_s_mean", "slo_attainment_mean", "ratio_to_bound_mean"):
            assert isinstance(e[key], float), (name, key)
        costs = [row["loops"][name]["total_cost_usd"] for row in data["rows"]]
        assert abs(e["cost_usd_mean"] - sum(costs) / 2) < 0.01
        assert e["ratio_to_bound_mean"] >= 1.0  # the bound is below every loop
        # the same work as the bound's: the bill plus the training backlog at the horizon, never below the bill
        assert e["backlog_gpu_hours_mean"] >= 0.0
        assert e["work_equal_cost_usd_mean"] >= e["cost_usd_mean"] - 0.01
        assert e["work_equal_ratio_to_bound_mean"] >= e["ratio_to_bound_mean"] - 1e-4
    assert set(data["targets"]) == {"common_practice", "baseline", "ratio_to_bound"}
    for other in ("common_practice", "baseline"):
        tg = data["targets"][other]
        assert isinstance(tg["work_equal_cost_ratio_of_means"], float) and isinstance(tg["work_equal_cost_met"], bool)
        # the per-seed ratios' 95 % confidence interval holds their mean and their own rows
        lo, hi = tg["cost_ratio_per_seed_ci95"]
        per_seed = [row["loops"]["gpufleet"][f"ratio_to_{other}"] for row in data["rows"]]
        assert lo <= tg["cost_ratio_per_seed_mean"] <= hi
        assert abs(tg["cost_ratio_per_seed_mean"] - sum(per_seed) / 2) < 1e-4
        assert f"95% CI {lo:.3f}-{hi:.3f}" in text
    assert "for the same work" in text


def test_bench_loop_takes_a_scenario_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    good = REPO / "scenarios" / "serving_product.yaml"
    r = run("bench", "loop", "--seeds", "3", "--days", "2", "--scenario", str(good))
    assert r.returncode == 0, r.stderr
    assert "serving_product" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("target_rps_per_replica: 6.0", "target_rps_per_replica: -6.0"))
    r = run("bench", "loop", "--seeds", "3", "--scenario", str(bad))
    assert r.returncode == 2
    assert "serving[0].target_rps_per_replica" in r.stderr and "bad.yaml:" in r.stderr
    assert "Traceback" not in r.stderr
    r = run("bench", "loop", "--scenario", "no-such-scenario")
    assert r.returncode == 2 and "--scenario" in r.stderr and "Traceback" not in r.stderr
