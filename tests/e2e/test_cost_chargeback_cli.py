"""``gpufleet cost chargeback`` on CSV tables: the hand-computed example to the cent, and clear input errors."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

CAPACITY = """id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h,owner_team_id
res-1,res,reserved,h100_80gb,8,2026-01-01T00:00:00Z,2026-02-01T00:00:00Z,4.00,platform
od-1,od,on_demand,h100_80gb,2,2026-01-05T00:00:00Z,2026-01-05T10:00:00Z,6.00,
"""
ALLOCATIONS = """id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end,shared,serving,pod
a1,train-1,search,t-search,ns-search,ranking,res,h100_80gb,4,2026-01-05T00:00:00Z,2026-01-05T10:00:00Z,,,train-1-0
a2,train-2,ads,t-ads,ns-ads,bidding,res,h100_80gb,2,2026-01-05T00:00:00Z,2026-01-05T05:00:00Z,,,
a3,serve-ads,ads,t-ads,ns-ads,bidding,od,h100_80gb,1/2,2026-01-05T00:00:00Z,2026-01-05T10:00:00Z,,true,
a4,nb-4,search,t-search,ns-search,notebooks,od,h100_80gb,1/7,2026-01-05T00:00:00Z,2026-01-05T07:00:00Z,,,
a5,gateway,platform,t-plat,ns-gw,gateway,od,h100_80gb,1,2026-01-05T00:00:00Z,2026-01-05T10:00:00Z,true,,
"""
TELEMETRY = """timestamp,metric,namespace,pod,device,value
2026-01-05T00:00:00Z,DCGM_FI_DEV_GPU_UTIL,ns-search,train-1-0,n1/0,50
2026-01-05T00:00:00Z,DCGM_FI_DEV_GPU_UTIL,ns-ads,serve-ads,n2/0,80
2026-01-05T00:00:00Z,DCGM_FI_DEV_GPU_UTIL,ns-x,unknown,n3/0,99
"""
WINDOW = ["--from", "2026-01-05T00:00:00Z", "--to", "2026-01-05T10:00:00Z"]


def _files(tmp_path: Path) -> list[str]:
    (tmp_path / "cap.csv").write_text(CAPACITY)
    (tmp_path / "alloc.csv").write_text(ALLOCATIONS)
    (tmp_path / "tel.csv").write_text(TELEMETRY)
    return ["--capacity", str(tmp_path / "cap.csv"), "--allocations", str(tmp_path / "alloc.csv"), *WINDOW]


def test_chargeback_matches_the_hand_example_to_the_cent(tmp_path: Path) -> None:
    rules = ["--idle-rule", "proportional", "--shared-rule", "proportional"]
    outputs = ["--telemetry", str(tmp_path / "tel.csv"), "--csv", str(tmp_path / "o.csv")]
    args = ["cost", "chargeback", *_files(tmp_path), "--by", "team", *rules, *outputs]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = {ln.split(",")[0]: ln.split(",") for ln in (tmp_path / "o.csv").read_text().strip().splitlines()}
    assert rows["search"][-1] == "308.20" and rows["ads"][-1] == "131.80" and rows["TOTAL"][-1] == "440.00"
    assert rows["search"][2] == "0.0417"  # one 5-minute sample of one GPU at 50 %: 0.5 * 300 s = 1/24 GPU-h


def test_bad_input_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    files = _files(tmp_path)
    (tmp_path / "alloc.csv").write_text(ALLOCATIONS.replace("1/7", "1/9"))
    res = CliRunner().invoke(app, ["cost", "chargeback", *files])
    assert res.exit_code == 2
    assert "alloc.csv:5" in res.output and "gpus" in res.output and "Traceback" not in res.output
