"""``gpufleet bench autoscale`` from the command line: JSON output and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
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


def _sd_like(tmp_path: Path) -> Path:
    """A small per-request file in the shape of the Alibaba GenAI SD trace (generated here, not the data)."""
    rng = np.random.default_rng(5)
    rows = ["gmt_create,predict_status,exec_time_seconds,checkpoint_model_version_id"]
    t = np.datetime64("2024-11-15T08:00:00")
    for i in range(120):
        t = t + np.timedelta64(int(rng.integers(5, 90)), "s")
        model = ("M0", "M0", "M1", "M2")[i % 4]
        status = "FAILED" if i % 17 == 0 else "SUCCEED"
        rows.append(f"{str(t).replace('T', ' ')},{status},{float(rng.integers(10, 40))},{model}")
    p = tmp_path / "sd_like.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_bench_autoscale_replays_a_per_request_file_by_group(tmp_path: Path) -> None:
    p = _sd_like(tmp_path)
    out = tmp_path / "r.json"
    args = ["bench", "autoscale", "--trace", str(p), "--time-column", "gmt_create", "--work-column"]
    args += ["exec_time_seconds", "--where", "predict_status=SUCCEED", "--group-by", "checkpoint_model_version_id"]
    args += ["--top-groups", "2", "--slo-s", "10", "--no-oracle", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "1 GPU(s)/replica" in res.output
    data = json.loads(out.read_text())
    ids = [d["trace"] for d in data]
    assert ids == [
        "sd_like.csv[predict_status=SUCCEED]:checkpoint_model_version_id=M0",
        "sd_like.csv[predict_status=SUCCEED]:checkpoint_model_version_id=M1",
    ]
    for d in data:
        assert set(d["policies"]) == {"gpufleet", "static_peak", "hpa", "kpa"}
        assert all(0.0 <= v["slo_attainment"] <= 1.0 for v in d["policies"].values())
    # the replica size scales the GPU-hours and nothing else
    out2 = tmp_path / "r2.json"
    res2 = CliRunner().invoke(app, [*args[:-1], str(out2), "--gpus-per-replica", "2"])
    assert res2.exit_code == 0, res2.output
    g1 = data[0]["policies"]["static_peak"]
    g2 = json.loads(out2.read_text())[0]["policies"]["static_peak"]
    assert g2["gpu_hours"] == pytest.approx(2 * g1["gpu_hours"], abs=2e-3)
    assert g2["slo_attainment"] == g1["slo_attainment"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--time-column", "gmt_create", "--work-column", "exec_secs"], "no column 'exec_secs'"),
        (["--time-column", "gmt_create"], "both --time-column and --work-column"),
        (["--where", "predict_status=SUCCEED"], "need --time-column"),
        ([], "--time-column, --work-column"),
    ],
)
def test_bench_autoscale_per_request_errors_are_one_line(tmp_path: Path, extra: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, ["bench", "autoscale", "--trace", str(_sd_like(tmp_path)), *extra])
    assert res.exit_code == 2
    assert needle in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_bench_autoscale_bad_service_time_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("t,secs\n2024-01-01 00:00:00,3\n2024-01-01 00:00:05,soon\n")
    res = CliRunner().invoke(
        app, ["bench", "autoscale", "--trace", str(p), "--time-column", "t", "--work-column", "secs"]
    )
    assert res.exit_code == 2
    assert "bad.csv:3" in res.output and "secs" in res.output


def test_bench_autoscale_exclusive_queue_replays_one_request_per_replica(tmp_path: Path) -> None:
    p = _sd_like(tmp_path)
    base = ["bench", "autoscale", "--trace", str(p), "--time-column", "gmt_create", "--work-column"]
    base += ["exec_time_seconds", "--slo-s", "10"]
    outs = {}
    for queue in ("batched", "exclusive"):
        out = tmp_path / f"{queue}.json"
        res = CliRunner().invoke(app, [*base, "--queue", queue, "--json", str(out)])
        assert res.exit_code == 0, res.output
        assert f"{queue} queue" in " ".join(res.output.split())
        outs[queue] = json.loads(out.read_text())
    ex = outs["exclusive"]
    assert set(ex["policies"]) == {"gpufleet", "static_peak", "hpa", "kpa"}
    assert "analysis" not in ex  # the oracle's miss table is the batched pool's: no oracle row
    assert "analysis" in outs["batched"]
    # a request that holds a replica alone needs fewer constant replicas than the fluid pool's 2 s-scale
    # spreading of 10-40 s requests asks for, never more work than it has
    assert ex["policies"]["static_peak"]["gpu_hours"] <= outs["batched"]["policies"]["static_peak"]["gpu_hours"]


def test_bench_autoscale_exclusive_queue_refuses_a_rate_series(tmp_path: Path) -> None:
    p = tmp_path / "rates.csv"
    p.write_text("timestamp,series_id,value\n2024-01-01T00:00:00Z,a,5\n2024-01-01T00:10:00Z,a,6\n")
    res = CliRunner().invoke(app, ["bench", "autoscale", "--trace", str(p), "--queue", "exclusive"])
    assert res.exit_code == 2
    msg = " ".join(res.output.split())
    assert "rates.csv" in msg and "queue" in msg and "per-request" in msg
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, ["bench", "autoscale", "--trace", str(p), "--queue", "fifo"])
    assert res.exit_code == 2 and "fifo" in res.output
