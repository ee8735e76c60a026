"""Review: names from the user's files printed to the terminal as Rich markup (cli/cmd_cost.py,
report/summary.py).

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now.
"""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
CAP = "id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h\nc1,p1,on_demand,h100_80gb,1,0,7200,2\n"
ALLOC = "id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end\n"


def test_a_team_name_with_brackets_is_printed_as_text_and_the_csv_is_written(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``cost chargeback`` puts each row's label into the Rich table unescaped (cmd_cost.py,
    ``t.add_row(r.key, ...)``), so a team id such as ``[/red]`` raises ``rich.errors.MarkupError`` (a traceback, and the
    ``--csv`` file, written after the table, is never written), and ``[bold]ads`` is shown as ``ads``, i.e. as another
    team."""
    (tmp_path / "cap.csv").write_text(CAP)
    (tmp_path / "alloc.csv").write_text(
        ALLOC + "a1,w1,[/red],ten,ns,f,p1,h100_80gb,1,0,3600\na2,w2,[bold]ads,ten,ns,f,p1,h100_80gb,1,3600,7200\n"
    )
    out = tmp_path / "out.csv"
    args = ["cost", "chargeback", "--capacity", str(tmp_path / "cap.csv"), "--allocations", str(tmp_path / "alloc.csv"),
            "--from", "0", "--to", "7200", "--csv", str(out)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exception is None, repr(res.exception)
    assert res.exit_code == 0, res.output
    assert "[/red]" in res.output and "[bold]ads" in res.output, res.output
    with out.open() as fh:
        assert {r["team"] for r in csv.DictReader(fh)} >= {"[/red]", "[bold]ads"}


def test_a_scenario_name_with_brackets_does_not_lose_the_run(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``print_report`` (report/summary.py) builds the table title from ``doc['scenario']``
    without ``escape`` (it escapes every other cell), so a scenario named ``[/x]`` raises ``rich.errors.MarkupError``
    after the whole simulation ran: a traceback, and ``--json``/``--report`` (written after the terminal report) are
    lost."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        'name: "[/x]"\nseed: 1\ndays: 1\npools:\n- sku: h100_80gb\n  on_demand_quota_gpus: 16\n'
        "experiments:\n- sku: h100_80gb\n  jobs_per_day: 20\n  teams: {a: 1}\n  size_gpus: {1: 1}\n"
    )
    out = tmp_path / "out.json"
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--loops", "gpufleet", "--json", str(out)])
    assert res.exception is None, repr(res.exception)
    assert res.exit_code == 0 and out.exists(), res.output
