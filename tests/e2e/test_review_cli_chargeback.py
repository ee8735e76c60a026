"""Review: ``gpufleet cost chargeback`` on hostile capacity/allocation tables and its cost arithmetic.

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now.
"""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
CAP = "id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h\n"
ALLOC = "id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end\n"


def _chargeback(tmp_path: Path, cap: str, alloc: str, *extra: str, window: tuple[str, str] = ("0", "7200")):
    (tmp_path / "cap.csv").write_text(CAP + cap)
    (tmp_path / "alloc.csv").write_text(ALLOC + alloc)
    args = ["cost", "chargeback", "--capacity", str(tmp_path / "cap.csv"), "--allocations",
            str(tmp_path / "alloc.csv"), "--from", window[0], "--to", window[1], *extra]  # fmt: skip
    return runner.invoke(app, args)


def _clean_exit_2(res) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return " ".join(res.output.split())


def _csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as fh:
        return {r[next(iter(r))]: r for r in csv.DictReader(fh)}


def test_a_huge_negative_price_is_one_clear_line_not_a_decimal_traceback(tmp_path: Path) -> None:
    """Review (fixed), the defect: a price such as ``-1e30`` passes the ``usd > MAX_PRICE_USD`` check (only an upper
    bound), then ``price_to_uusd`` quantizes a 37-digit Decimal and raises ``decimal.InvalidOperation``, which nothing
    catches: a traceback instead of "price_usd_per_gpu_h must be >= 0" naming cap.csv:2."""
    res = _chargeback(
        tmp_path, "c1,p1,on_demand,h100_80gb,1,0,7200,-1e30\n", "a1,w1,t1,ten,ns,f,p1,h100_80gb,1,0,3600\n"
    )
    text = _clean_exit_2(res)
    assert "cap.csv:2" in text and "price_usd_per_gpu_h" in text


def test_two_gpus_held_at_once_on_a_one_gpu_pool_is_refused(tmp_path: Path) -> None:
    """Review (fixed), the defect: over-allocation is checked on part-seconds summed over the whole window, not at any
    instant. A pool of 1 GPU for 2 h with a workload holding 2 GPUs during the first hour (200 % allocated) is accepted,
    and the second hour, when the GPU sat unused, shows no idle cost at all (idle $0.00): the over-allocation cancels
    the idle."""
    res = _chargeback(
        tmp_path,
        "c1,p1,on_demand,h100_80gb,1,0,7200,2\n",
        "a1,w1,alpha,ten,ns,f,p1,h100_80gb,2,0,3600\n",
        "--csv", str(tmp_path / "out.csv"),
    )  # fmt: skip
    if res.exit_code == 0:  # if it is accepted at all, the idle hour must show as idle ($2.00 of the $4.00)
        rows = _csv_rows(tmp_path / "out.csv")
        assert rows["TOTAL"]["idle_usd"] == "2.00", (tmp_path / "out.csv").read_text()
    text = _clean_exit_2(res)
    assert "p1" in text


def test_duplicate_allocation_ids_do_not_double_count_gpu_hours(tmp_path: Path) -> None:
    """Review (fixed), the defect: allocation ids are not checked for uniqueness and ``part_s_by_allocation`` is keyed
    by id (cost/allocate.py), so two rows with the same id (a1 for alpha hour 1, a1 for beta hour 2) each get the
    other's part-seconds in ``chargeback`` (cost/chargeback.py): 4.0 GPU-h "held" on a pool that had 2.0 GPU-h."""
    res = _chargeback(
        tmp_path,
        "c1,p1,on_demand,h100_80gb,1,0,7200,2\n",
        "a1,w1,alpha,ten,ns,f,p1,h100_80gb,1,0,3600\na1,w2,beta,ten,ns,f,p1,h100_80gb,1,3600,7200\n",
        "--csv", str(tmp_path / "out.csv"),
    )  # fmt: skip
    if res.exit_code == 2:  # refusing the duplicate id, naming it, is a fine answer too
        assert "a1" in res.output and "Traceback" not in res.output
        return
    assert res.exit_code == 0, res.output
    rows = _csv_rows(tmp_path / "out.csv")
    assert rows["alpha"]["allocated_gpu_h"] == "1.0000" and rows["beta"]["allocated_gpu_h"] == "1.0000", rows
    assert rows["TOTAL"]["allocated_gpu_h"] == "2.0000", rows


def test_team_rows_add_up_to_the_total_to_the_cent(tmp_path: Path) -> None:
    """Review (fixed), the defect: every row's dollars are rounded on their own (``units_to_cents`` per row,
    chargeback.py and cmd_cost.py), so a bill drifts from the fleet cost: three teams holding a third of a $0.02
    GPU-hour each are billed 0.01 + 0.01 + 0.01 = $0.03 while the TOTAL row says $0.02 (a cent invented). With more rows
    the drift grows (840 teams at 1/840 GPU are each billed $0.00 on a $3.36 fleet). Rows should be apportioned in cents
    (largest remainder) so they sum to the total."""
    alloc = "".join(f"a{i},w{i},team{i},ten,ns,f,p1,h100_80gb,1/3,0,3600\n" for i in range(3))
    res = _chargeback(
        tmp_path, "c1,p1,on_demand,h100_80gb,1,0,3600,0.02\n", alloc, "--csv", str(tmp_path / "out.csv"),
        window=("0", "3600"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = _csv_rows(tmp_path / "out.csv")
    total = Decimal(rows.pop("TOTAL")["total_usd"])
    assert total == Decimal("0.02")
    assert sum(Decimal(r["total_usd"]) for r in rows.values()) == total, rows


def test_a_huge_bucket_is_refused_cleanly(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``--bucket-s`` has ``min=1`` but no maximum; 99999999999999999999 reaches numpy in
    ``to_usage_columns`` (cost/telemetry.py) and raises OverflowError ("Python int too large to convert to C long"): a
    traceback instead of a clear error naming --bucket-s."""
    (tmp_path / "tel.csv").write_text(
        "timestamp,metric,namespace,pod,device,value\n0,DCGM_FI_DEV_GPU_UTIL,ns,w1,n/0,50\n"
    )
    res = _chargeback(
        tmp_path,
        "c1,p1,on_demand,h100_80gb,1,0,7200,2\n",
        "a1,w1,alpha,ten,ns,f,p1,h100_80gb,1,0,3600\n",
        "--telemetry", str(tmp_path / "tel.csv"), "--bucket-s", "99999999999999999999",
    )  # fmt: skip
    text = _clean_exit_2(res)
    assert "bucket" in text
