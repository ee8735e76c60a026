"""The two scheduler benchmarks through the CLI, on tiny inputs; bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app


def _write(tmp: Path) -> tuple[Path, Path]:
    nodes = tmp / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},64000,262144,{8 if i % 2 else 2},{'V100' if i % 2 else 'T4'}\n" for i in range(12))
    )
    pods = tmp / "pods.csv"
    rows = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    ]
    shapes = [
        (4000, 8192, 1, 500, ""),
        (8000, 16384, 1, 1000, ""),
        (16000, 32768, 2, 1000, "V100"),
        (2000, 4096, 0, 0, ""),
    ]
    for i in range(60):
        c, m, n, g, spec = shapes[i % len(shapes)]
        rows.append(f"p{i:03d},{c},{m},{n},{g},{spec},LS,Running,0,1,0")
    pods.write_text("\n".join(rows) + "\n")
    return nodes, pods


def test_binpack_runs_every_policy_and_writes_the_json_contract(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app, ["bench", "binpack", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())["policies"]
    assert set(got) == {"random", "dotprod", "bestfit", "packing", "clustering", "fgd", "gpufleet"}
    for row in got.values():
        assert 0.0 <= row["unallocated_gpu_pct_at_100"]["mean"] <= 100.0 and row["final_allocation_pct"] > 0


def test_binpack_rejects_an_unknown_policy_with_exit_2(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path)
    res = CliRunner().invoke(app, ["bench", "binpack", "--nodes", str(nodes), "--pods", str(pods), "--policy", "magic"])
    assert res.exit_code == 2 and "unknown policy" in res.output


def test_binpack_reports_a_bad_csv_field_with_its_line(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path)
    pods.write_text(pods.read_text().replace("p001,8000", "p001,lots"))
    res = CliRunner().invoke(app, ["bench", "binpack", "--nodes", str(nodes), "--pods", str(pods)])
    assert res.exit_code == 2 and "pods.csv:3" in res.output


def test_sched_throughput_reports_rate_and_latency(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = CliRunner().invoke(app, ["bench", "sched-throughput", "--nodes", "200", "--pods", "2000", "--json", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["pods"] == 2000 and r["decisions_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"]


def test_binpack_pins_a_share_of_gpu_pods_and_names_the_derived_list(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path)
    out = tmp_path / "pin.json"
    res = CliRunner().invoke(
        app,
        [
            *("bench", "binpack", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1"),
            *("--policy", "gpufleet,fgd", "--pin-share", "0.5", "--pin-spread", "uniform", "--json", str(out)),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["trace"] == "pods+pin50-uniform" and set(doc["policies"]) == {"gpufleet", "fgd"}


def test_binpack_refuses_a_pin_share_outside_0_1_naming_the_option(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path)
    res = CliRunner().invoke(
        app, ["bench", "binpack", "--nodes", str(nodes), "--pods", str(pods), "--pin-share", "1.5"]
    )
    assert res.exit_code == 2 and "share" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(
        app, ["bench", "binpack", "--nodes", str(nodes), "--pods", str(pods), "--pin-share", "0.2", "--pin-spread", "x"]
    )
    assert res.exit_code == 2 and "spread" in res.output


def test_binpack_packs_onto_an_inventory_file_and_names_its_bad_line(tmp_path: Path) -> None:
    _, pods = _write(tmp_path)
    spot = tmp_path / "alibaba_spot_gpu_nodes.csv"
    spot.write_text(
        "gpu_model,gpu_capacity_num,cpu_num,node_name\n"
        + "".join(f"{'A10,1' if i % 3 else 'V100,8'},128,{i}\n" for i in range(12))
    )
    out = tmp_path / "r.json"
    args = ["bench", "binpack", "--nodes", str(spot), "--pods", str(pods), "--policy", "gpufleet,fgd"]
    res = CliRunner().invoke(app, [*args, "--seeds", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())["policies"]
    assert set(got) == {"gpufleet", "fgd"} and all(r["final_allocation_pct"] > 0 for r in got.values())
    spot.write_text(spot.read_text().replace("A10,1,128,2", "A10,one,128,2"))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "alibaba_spot_gpu_nodes.csv:4" in res.output and "Traceback" not in res.output


def test_binpack_changes_the_workload_mix_and_refuses_a_bad_mix_naming_the_option(tmp_path: Path) -> None:
    nodes, pods = _write(tmp_path)
    out = tmp_path / "mix.json"
    args = ["bench", "binpack", "--nodes", str(nodes), "--pods", str(pods), "--policy", "gpufleet,fgd"]
    res = CliRunner().invoke(app, [*args, "--seeds", "1", "--mix", "multigpu:0.5", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["trace"] == "pods+multigpu50"
    for bad, word in (("multigpu", "--mix"), ("cpu:x", "--mix"), ("gpus:2", "kind"), ("multigpu:1.5", "level")):
        res = CliRunner().invoke(app, [*args, "--mix", bad])
        assert res.exit_code == 2 and word in res.output and "Traceback" not in res.output, (bad, res.output)
