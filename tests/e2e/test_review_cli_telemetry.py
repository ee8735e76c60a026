"""Review: telemetry uploads read by ``gpufleet cost chargeback --telemetry`` (adapters/telemetry_files.py,
adapters/telemetry_prometheus.py) and how samples become "GPU-h used" (cost/telemetry.py, cost/meter.py).

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
CAP = "id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h\nc1,p1,on_demand,h100_80gb,1,0,7200,2\n"
ALLOC = "id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end\n"
TEL = "timestamp,metric,namespace,pod,device,value\n"
ROW = {"timestamp": 0, "metric": "DCGM_FI_DEV_GPU_UTIL", "namespace": "ns", "pod": "w1", "device": "n1/0"}


def _invoke(tmp_path: Path, alloc: str, tel_name: str, tel_text: str, *extra: str, to: str = "7200"):
    (tmp_path / "cap.csv").write_text(CAP)
    (tmp_path / "alloc.csv").write_text(ALLOC + alloc)
    (tmp_path / tel_name).write_text(tel_text)
    args = ["cost", "chargeback", "--capacity", str(tmp_path / "cap.csv"), "--allocations", str(tmp_path / "alloc.csv"),
            "--from", "0", "--to", to, "--telemetry", str(tmp_path / tel_name), *extra]  # fmt: skip
    return runner.invoke(app, args)


BAD_JSON = {
    "value is a 401-digit integer": json.dumps([{**ROW, "value": 10**400}]),
    "value is a 5000-digit integer": "[" + json.dumps(ROW)[:-1] + ', "value": ' + "9" * 5000 + "}]",
    "arrays nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "Prometheus timestamp is a 401-digit integer": json.dumps(
        {"data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[10**400, "1"]]}]}}
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_hostile_json_telemetry_is_one_clear_line(tmp_path: Path, case: str) -> None:
    """Review (fixed), the defect: ``read_json_text``/``_rows_to_batch``/``add_matrix`` only catch JSONDecodeError,
    TypeError and ValueError around ``json.loads`` and ``float(...)``. A huge JSON integer makes ``float()`` raise
    OverflowError, an integer over 4300 digits makes ``json.loads`` raise a plain ValueError (not JSONDecodeError), and
    deep nesting raises RecursionError: each a traceback instead of an error naming the file and field."""
    res = _invoke(tmp_path, "a1,w1,alpha,ten,ns,f,p1,h100_80gb,1,0,3600\n", "tel.json", BAD_JSON[case])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2 and "tel.json" in res.output, res.output


def test_a_workload_that_ran_twice_gets_its_own_usage_in_each_allocation(tmp_path: Path) -> None:
    """Review (fixed), the defect: telemetry is matched to allocations by ``(namespace, pod)`` alone, with ``pod``
    defaulting to the workload id (adapters/cost_files.py, ``read_allocations_csv``: a dict, so the last allocation
    wins) and no look at the sample's time (cost/telemetry.py ``to_usage_columns``). A workload held by team alpha in
    hour 1 and by team beta in hour 2, busy 100 % throughout, is reported as alpha 0 GPU-h used and beta 2 GPU-h used of
    1 GPU-h held (200 % utilization)."""
    alloc = "a1,w1,alpha,ten,ns,f,p1,h100_80gb,1,0,3600\na2,w1,beta,ten,ns,f,p1,h100_80gb,1,3600,7200\n"
    tel = TEL + "".join(f"{t},DCGM_FI_DEV_GPU_UTIL,ns,w1,n1/0,100\n" for t in range(0, 7200, 300))
    res = _invoke(tmp_path, alloc, "tel.csv", tel, "--csv", str(tmp_path / "out.csv"))
    assert res.exit_code == 0, res.output
    with (tmp_path / "out.csv").open() as fh:
        rows = {r["team"]: r for r in csv.DictReader(fh)}
    for team in ("alpha", "beta"):
        assert float(rows[team]["used_gpu_h"]) == pytest.approx(1.0), rows[team]
        assert float(rows[team]["used_gpu_h"]) <= float(rows[team]["allocated_gpu_h"]) + 1e-9, rows[team]


def test_used_gpu_hours_never_exceed_held_when_the_window_is_shorter_than_a_bucket(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``meter_usage`` (cost/meter.py) credits every bucket that *starts* in the window with
    a full ``bucket_s`` of use, even when the window ends inside it. A 60 s window with the default 300 s bucket and one
    sample at 100 % reports 0.0833 GPU-h used on 0.0167 GPU-h held: utilization 500 %."""
    res = _invoke(
        tmp_path,
        "a1,w1,alpha,ten,ns,f,p1,h100_80gb,1,0,7200\n",
        "tel.csv",
        TEL + "0,DCGM_FI_DEV_GPU_UTIL,ns,w1,n1/0,100\n",
        "--csv", str(tmp_path / "out.csv"),
        to="60",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    with (tmp_path / "out.csv").open() as fh:
        row = {r["team"]: r for r in csv.DictReader(fh)}["alpha"]
    assert float(row["used_gpu_h"]) <= float(row["allocated_gpu_h"]) + 1e-4, row
    assert row["utilization"] == "" or float(row["utilization"]) <= 1.0, row
