"""Review (hostile): garbled samples in a telemetry upload read by ``gpufleet cost chargeback --telemetry``
(adapters/telemetry_files.py -> cost/telemetry.py ``to_usage_columns`` -> cost/meter.py).

cost/meter.py documents samples outside [0, 1] as a telemetry fault (NaN skipped, values clipped), but the
clipping happens after ``to_usage_columns`` has already averaged each bucket's raw samples.
"""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
CAP = "id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h\nc1,p1,on_demand,h100_80gb,2,0,3600,2\n"
ALLOC = (
    "id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end\n"
    "a1,w1,alpha,ten,ns,f,p1,h100_80gb,1,0,3600\n"
    "a2,w2,beta,ten,ns,f,p1,h100_80gb,1,0,3600\n"
)


def test_one_garbled_sample_does_not_decide_an_hour_of_chargeback(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``to_usage_columns`` averages each bucket's raw samples and cost/meter.py
    clips only the mean. Team alpha's GPU is idle (0 % every minute) but one row says 1e6 %: the hour's mean was
    16,667 %, clipped to 1, and alpha was billed as 1.0 GPU-h used of 1.0 held. Team beta's GPU is idle too, with one
    row ``inf`` and one ``-inf``: the mean was NaN, skipped, and beta's 58 real samples counted for nothing
    (utilization not measured). Fixed in cost/telemetry.py ``BatchBuilder.add``: each sample is clipped to 0..1 and
    an infinite one is no measurement (NaN)."""
    rows = ["timestamp,metric,namespace,pod,device,value"]
    for i in range(60):
        rows.append(f"{i * 60},DCGM_FI_DEV_GPU_UTIL,ns,w1,n1/0,{'1e6' if i == 30 else 0}")
        rows.append(f"{i * 60},DCGM_FI_DEV_GPU_UTIL,ns,w2,n1/1,{ {30: 'inf', 31: '-inf'}.get(i, 0) }")
    for name, text in (("cap.csv", CAP), ("alloc.csv", ALLOC), ("tel.csv", "\n".join(rows) + "\n")):
        (tmp_path / name).write_text(text)
    res = runner.invoke(app, ["cost", "chargeback", "--capacity", str(tmp_path / "cap.csv"),
                              "--allocations", str(tmp_path / "alloc.csv"), "--from", "0", "--to", "3600",
                              "--telemetry", str(tmp_path / "tel.csv"), "--bucket-s", "3600",
                              "--csv", str(tmp_path / "out.csv")])  # fmt: skip
    assert res.exit_code == 0, res.output
    with (tmp_path / "out.csv").open() as f:
        by_team = {r["team"]: r for r in csv.DictReader(f)}
    # each GPU was busy at most one minute in sixty
    assert float(by_team["alpha"]["used_gpu_h"]) <= 1 / 60 + 1e-4, by_team["alpha"]
    assert float(by_team["beta"]["measured_gpu_h"]) == 1.0, by_team["beta"]  # its 58 real samples were measured
    assert float(by_team["beta"]["used_gpu_h"]) <= 1 / 60 + 1e-4, by_team["beta"]
