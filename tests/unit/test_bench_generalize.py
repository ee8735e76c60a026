"""``gpufleet bench generalize`` on a tiny generated data directory (no ../shared needed)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.bench.generalize import GeneralizeSettings, loto_choice, run_generalize
from gpufleet.cli.main import app


def _write_data(root: Path) -> None:
    rng = np.random.default_rng(3)
    (root / "serving").mkdir(parents=True)
    (root / "openb").mkdir()
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    lines = ["timestamp,series_id,value"]
    for sid, scale in (("m-a", 40.0), ("m-b", 9.0)):
        for k in range(8 * 24):  # 8 days, hourly
            v = scale * (1.2 + math.sin(2 * math.pi * k / 24)) + rng.normal(0, scale * 0.05)
            lines.append(f"{(t0 + timedelta(hours=k)).isoformat()},{sid},{max(v, 0.1):.3f}")
    (root / "serving" / "servegen_rate_10min.csv").write_text("\n".join(lines) + "\n")
    az = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = 0.0
    while t < 900:  # 15 minutes of requests
        t += float(rng.exponential(0.5))
        az.append(f"{(t0 + timedelta(seconds=t)).strftime('%Y-%m-%d %H:%M:%S.%f')},{int(rng.integers(200, 3000))},20")
    (root / "serving" / "AzureLLMInferenceTrace_code.csv").write_text("\n".join(az) + "\n")
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"] + [f"n{i},64000,262144,8,V100M32" for i in range(6)]
    (root / "openb" / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    pods = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    ]
    for i in range(60):
        n, milli = (1, int(rng.choice([250, 500, 1000]))) if i % 3 else (2, 1000)
        c = int(rng.integers(0, 9 * 86_400))
        pods.append(f"p{i},4000,16384,{n},{milli},,LS,Running,{c},{c + int(rng.integers(3600, 86_400))},{c}")
    (root / "openb" / "openb_pod_list_default.csv").write_text("\n".join(pods) + "\n")


def _write_helios(root: Path, cluster: str, days: int, every_min: int = 1) -> None:
    """A Helios-format file (two GPU columns and the capacity) of ``days`` days, a row every ``every_min`` minutes."""
    (root / "training").mkdir(exist_ok=True)
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = ["time,running_gpu_num,pending_gpu_num,total_gpu_num"]
    rows += [
        f"{(t0 + timedelta(minutes=every_min * k)).isoformat()},{100 + k % 7},{k % 3},512"
        for k in range(days * 24 * 60 // every_min)
    ]
    (root / "training" / f"helios_{cluster}_minutely.csv").write_text("\n".join(rows) + "\n")


def test_loto_never_scores_a_trace_with_the_setting_it_chose() -> None:
    # "b" is best only on trace z: z alone would choose b, the others choose a; z is scored with a
    per = {
        "x": {"a": (0, 1.0), "b": (1, 1.2)},
        "y": {"a": (0, 1.0), "b": (1, 1.3)},
        "z": {"a": (1, 1.5), "b": (0, 0.8)},
    }
    choice = loto_choice(per, ("a", "b"))
    assert choice["z"] == ("a", ["x", "y"])
    # without x, a and b fail once each and b's mean ratio is lower (1.05 vs 1.25)
    assert choice["x"] == ("b", ["y", "z"])


@pytest.mark.slow
def test_generalize_quick_on_a_tiny_trace_directory(tmp_path: Path) -> None:
    _write_data(tmp_path)
    doc = run_generalize(tmp_path, GeneralizeSettings(quick=True))
    fc = doc["forecast"]["rows"]
    assert {r["series"] for r in fc} == {"servegen:m-a", "servegen:m-b", "openb:default"}
    for r in fc:
        assert r["setting"] in doc["forecast"]["settings"]
        assert 0.0 <= r["coverage_80"] <= 1.0 and r["pinball_ratio"] > 0
        # the default's band is also scored on the days before the four test days (8 days of ServeGen: 2 fit)
        before = doc["forecast"]["coverage_before"][r["series"]]
        assert before["days"] >= 2 and 0.0 <= before["coverage_80"] <= 1.0
    pr = doc["procure"]["rows"]
    assert {r["series"].split(" ")[1] for r in pr} == {"168/24", "720/168"}
    for r in pr:
        assert r["gpufleet_ratio"] >= 1.0 - 1e-6  # never below the hindsight optimum
        assert set(r["baselines"]) == {"all_on_demand", "reserve_peak", "lookback_p50", "online_breakeven"}
    (az,) = doc["autoscale"]["rows"]
    assert az["warmup_s"] == 120.0  # a 15-minute trace is scored after one cold start
    assert set(az["policies"]) == {"gpufleet", "static_peak", "hpa", "kpa"}
    (bp,) = doc["binpack"]["rows"]
    assert bp["seeds"] == [42] and 0.0 <= bp["fgd"] <= 100.0


def test_cli_refuses_an_unknown_stage(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bench", "generalize", "--data", str(tmp_path), "--stages", "nope"])
    assert res.exit_code != 0
    assert "stages" in res.output and "Traceback" not in res.output


def test_cli_writes_json_for_one_stage(tmp_path: Path) -> None:
    _write_data(tmp_path / "d")
    out = tmp_path / "g.json"
    res = CliRunner().invoke(
        app,
        ["bench", "generalize", "--data", str(tmp_path / "d"), "--quick", "--stages", "binpack", "--json", str(out)],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["binpack"]["total"] == 1 and "| binpack |" in res.output


def test_the_binpack_stage_also_packs_the_derived_pinned_and_mixed_lists_of_each_base_it_finds(tmp_path: Path) -> None:
    _write_data(tmp_path)
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"] + [
        f"n{i},64000,262144,{8 if i % 2 else 2},{'G2' if i % 2 else 'T4'}" for i in range(8)
    ]
    (tmp_path / "openb" / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    doc = run_generalize(tmp_path, GeneralizeSettings(quick=False, seeds=(42,)), stages=("binpack",))
    names = [r["trace"] for r in doc["binpack"]["rows"]]
    # the public list, then the variants built on "default" (no gpushare list here)
    assert names == [
        "openb_pod_list_default",
        "openb_pod_list_default+pin10",
        "openb_pod_list_default+pin33",
        "openb_pod_list_default+pin20-uniform",
        "openb_pod_list_default+pin33-family",
        "openb_pod_list_default+multigpu20",  # no CPU-only pod here: no +cpu list
        "openb_pod_list_default+multigpu50",
    ]
    assert doc["binpack"]["total"] == 7


def test_the_binpack_stage_packs_the_public_lists_onto_each_inventory_it_finds(tmp_path: Path) -> None:
    _write_data(tmp_path)
    (tmp_path / "inventory").mkdir()
    spot = ["gpu_model,gpu_capacity_num,cpu_num,node_name"] + [f"A10,1,128,{i}" for i in range(20)] + ["H800,8,192,20"]
    (tmp_path / "inventory" / "alibaba_spot_gpu_nodes.csv").write_text("\n".join(spot) + "\n")
    doc = run_generalize(tmp_path, GeneralizeSettings(quick=False, seeds=(42,)), stages=("binpack",))
    rows = {r["trace"]: r for r in doc["binpack"]["rows"]}
    assert "openb_pod_list_default@spot" in rows and "openb_pod_list_default@pai2020" not in rows  # absent: skipped
    inv = rows["openb_pod_list_default@spot"]
    assert inv["pass"] == (inv["gpufleet"] < inv["fgd"]) and 0 <= inv["fgd"] < 100
    quick = run_generalize(tmp_path, GeneralizeSettings(quick=True, seeds=(42,)), stages=("binpack",))
    assert [r["trace"] for r in quick["binpack"]["rows"]] == ["openb_pod_list_default"]


def _write_prices(root: Path, rows: list[str]) -> None:
    (root / "prices").mkdir(parents=True, exist_ok=True)
    head = "instance_type,gpu,region,on_demand_usd_hr,reserved_1yr_noupfront_usd_hr,spot_min_usd_hr"
    (root / "prices" / "aws_gpu_instance_prices.csv").write_text("\n".join([head, *rows]) + "\n")


def test_reserved_ratios_come_from_the_rows_that_list_both_prices(tmp_path: Path) -> None:
    from gpufleet.bench.generalize_data import reserved_ratio, reserved_ratios
    from gpufleet.domain.errors import ValidationError

    _write_prices(
        tmp_path, ["a,H100,us,10,6,", "b,H100,eu,10,,3", "c,A10,us,n/a,1,", "d,L4,us,4,2.8,1", "e,T4,us,2,1.3,"]
    )
    assert reserved_ratios(tmp_path) == pytest.approx([0.6, 0.7, 0.65])
    assert [reserved_ratio(tmp_path, w) for w in ("min", "median", "max")] == pytest.approx([0.6, 0.65, 0.7])
    (tmp_path / "prices" / "aws_gpu_instance_prices.csv").write_text("instance_type,on_demand_usd_hr\na,1\n")
    with pytest.raises(ValidationError, match="reserved_1yr_noupfront_usd_hr"):
        reserved_ratios(tmp_path)
    with pytest.raises(ValidationError, match="no price file"):
        reserved_ratios(tmp_path / "nowhere")


def test_cli_prices_procurement_at_a_reserved_ratio_and_refuses_a_bad_one(tmp_path: Path) -> None:
    _write_data(tmp_path / "d")
    args = ["bench", "generalize", "--data", str(tmp_path / "d"), "--quick", "--stages", "procure"]
    for bad in ("1.5", "cheap", "nan", "max"):  # "max": no price file in this directory
        res = CliRunner().invoke(app, [*args, "--reserved-ratio", bad])
        assert res.exit_code == 2 and "Traceback" not in res.output, (bad, res.output)
        assert ("--reserved-ratio" if bad != "max" else "no price file") in res.output
    _write_prices(tmp_path / "d", ["a,H100,us,10,9,"])
    docs = {}
    for ratio in ("catalog", "max"):
        out = tmp_path / f"{ratio}.json"
        res = CliRunner().invoke(app, [*args, "--reserved-ratio", ratio, "--json", str(out)])
        assert res.exit_code == 0, res.output
        assert ("reserved price 0.9000 x on-demand" in res.output) == (ratio == "max")
        docs[ratio] = json.loads(out.read_text())
    assert docs["catalog"]["config"]["reserved_ratio"] is None
    assert docs["max"]["config"]["reserved_ratio"] == pytest.approx(0.9)
    # at 0.9 of on-demand a reservation rarely pays: the hindsight bill is dearer than at the catalog's 0.634
    hind = {k: [r["hindsight_usd"] for r in d["procure"]["rows"]] for k, d in docs.items()}
    assert all(m > c for m, c in zip(hind["max"], hind["catalog"], strict=True))


def test_every_helios_cluster_servegen_file_and_azure_trace_in_the_directory_is_a_trace(tmp_path: Path) -> None:
    from gpufleet.bench.generalize_data import forecast_series, procure_series

    _write_data(tmp_path)
    for cluster in ("earth", "saturn"):
        _write_helios(tmp_path, cluster, days=9, every_min=10)
    fc, pr = forecast_series(tmp_path), procure_series(tmp_path)
    for prefix in ("helios", "helios-saturn"):  # Earth keeps the row names of the first runs
        assert {f"{prefix}:running_gpu_num", f"{prefix}:pending_gpu_num"} <= set(fc) & set(pr)
        assert f"{prefix}:total_gpu_num" not in fc  # capacity, not demand
    serving = tmp_path / "serving"
    (serving / "servegen_rate_1h.csv").write_text((serving / "servegen_rate_10min.csv").read_text())
    fc, pr = forecast_series(tmp_path), procure_series(tmp_path)
    for prefix in ("servegen", "servegen-rate_1h"):  # the same series ids in two files stay apart
        assert {f"{prefix}:m-a", f"{prefix}:m-b"} <= set(fc) & set(pr)
    (serving / "AzureLLMInferenceTrace_conv.csv").write_text((serving / "AzureLLMInferenceTrace_code.csv").read_text())
    doc = run_generalize(tmp_path, GeneralizeSettings(quick=True), stages=("autoscale",))
    assert sorted(r["trace"] for r in doc["autoscale"]["rows"]) == [
        "AzureLLMInferenceTrace_code.csv",
        "AzureLLMInferenceTrace_conv.csv",
    ]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('time,running_gpu_num\n2024-01-01,1\n"unterminated,2\n', "cannot read the CSV"),
        ("when,running_gpu_num\n2024-01-01,1\n", "no time column"),
        ("time,running_gpu_num\nyesterday,1\n", "time: not a timestamp"),
        ("time,running_gpu_num\n2024-01-01 00:00,many\n", "running_gpu_num: not a numeric column"),
    ],
)
def test_a_broken_trace_file_exits_2_naming_file_and_field(tmp_path: Path, body: str, named: str) -> None:
    (tmp_path / "training").mkdir()
    bad = tmp_path / "training" / "helios_earth_minutely.csv"
    bad.write_text(body)
    res = CliRunner().invoke(app, ["bench", "generalize", "--data", str(tmp_path), "--quick", "--stages", "procure"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert str(bad) in res.output and named in res.output


def test_an_sd_trace_without_its_model_column_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "serving").mkdir()
    (tmp_path / "serving" / "alibaba_genai_sd_request_trace.csv").write_text("gmt_create,exec_time_seconds\n1,2\n")
    res = CliRunner().invoke(app, ["bench", "generalize", "--data", str(tmp_path), "--quick", "--stages", "procure"])
    assert res.exit_code == 2 and "checkpoint_model_version_id" in res.output and "Traceback" not in res.output


def test_the_forecast_stage_runs_on_a_finer_step_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from gpufleet.bench.generalize_data import forecast_series
    from gpufleet.bench.procure import pods_hourly_demand

    _write_data(tmp_path)
    _write_helios(tmp_path, "earth", days=9)
    hourly, fine = forecast_series(tmp_path), forecast_series(tmp_path, step_s=600)
    assert set(hourly) == set(fine)
    for sid in ("helios:running_gpu_num", "openb:default"):
        n = len(hourly[sid].values) - 1  # whole hours (the last may be cut short)
        assert fine[sid].step_s == 600 and 6 * n < len(fine[sid].values) <= 6 * (n + 1)
        # the same demand: each hour is the mean of its six 10-minute steps
        assert fine[sid].values[: 6 * n].reshape(-1, 6).mean(axis=1) == pytest.approx(hourly[sid].values[:n])
    assert fine["servegen:m-a"].step_s == 3600  # an hourly file keeps its own step
    pods = tmp_path / "openb" / "openb_pod_list_default.csv"
    assert pods_hourly_demand(pods, 600).sum() * 600 == pytest.approx(pods_hourly_demand(pods).sum() * 3600)
    args = ["bench", "generalize", "--data", str(tmp_path), "--quick", "--stages", "forecast"]
    for bad in ("7min", "2h", "5min", "soon"):
        res = CliRunner().invoke(app, [*args, "--forecast-step", bad])
        assert res.exit_code == 2 and "--forecast-step" in res.output and "Traceback" not in res.output, bad
    out = tmp_path / "f.json"
    res = CliRunner().invoke(app, [*args, "--forecast-step", "30min", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["config"]["forecast_step_s"] == 1800 and "means over 1800 s steps" in res.output
    assert {r["series"] for r in doc["forecast"]["rows"]} >= {"helios:running_gpu_num", "openb:default"}


def test_a_series_too_short_for_the_forecast_protocol_is_listed_not_fatal(tmp_path: Path) -> None:
    _write_data(tmp_path)
    _write_helios(tmp_path, "mars", days=3)
    out = tmp_path / "f.json"
    args = ["bench", "generalize", "--data", str(tmp_path), "--quick", "--stages", "forecast", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())["forecast"]
    assert set(doc["skipped"]) == {"helios-mars:running_gpu_num", "helios-mars:pending_gpu_num"}
    assert "72 steps of 3600 s" in doc["skipped"]["helios-mars:running_gpu_num"]
    assert "forecast skipped helios-mars:running_gpu_num" in res.output
    assert {r["series"] for r in doc["rows"]} == {"servegen:m-a", "servegen:m-b", "openb:default"}
