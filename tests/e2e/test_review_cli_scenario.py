"""Review: scenario YAML files given to ``gpufleet simulate --scenario`` (sim/scenario.py, cli/scenario_files.py).

Each test failed before its fix because of a defect in the product (see its docstring); all are fixed now.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.scenario_files import load_scenario
from gpufleet.domain.errors import ValidationError

runner = CliRunner()
BASE = """name: t
seed: 1
days: 1
pools:
- sku: h100_80gb
  on_demand_quota_gpus: 16
experiments:
- sku: h100_80gb
  jobs_per_day: 20
  teams: {a: 1}
  size_gpus: {1: 1}
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(("field", "text"), [
    ("teams", BASE.replace("teams: {a: 1}", "teams: {}")),
    ("size_gpus", BASE.replace("size_gpus: {1: 1}", "size_gpus: {}")),
])  # fmt: skip
def test_an_experiment_with_no_team_or_no_size_is_refused_not_a_crash(tmp_path: Path, field: str, text: str) -> None:
    """Review (fixed), the defect: ``ExperimentSpec.teams`` and ``size_gpus`` may be empty maps (sim/scenario.py: no
    min_length), so the file validates and ``simulate`` then dies in numpy's ``Generator.choice`` ("a must be a positive
    integer" / "a cannot be empty") with a traceback, after the user waited for the run to start."""
    res = runner.invoke(app, ["simulate", "--scenario", str(_write(tmp_path, text)), "--loops", "gpufleet"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2 and field in res.output and "s.yaml" in res.output, res.output


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``yaml.safe_load`` keeps the last of duplicate mapping keys silently, so ``days: 1``
    followed by a stray ``days: 3000`` simulates 3000 days with no word (the same for a pool's quota or a team given
    twice). A duplicate key is a mistake in the file: it should be refused naming the key and its line."""
    text = BASE.replace("days: 1\n", "days: 1\ndays: 3000\n")
    with pytest.raises(ValidationError) as exc:
        load_scenario(_write(tmp_path, text))
    assert "days" in str(exc.value) and "s.yaml:4" in str(exc.value)


def test_the_same_pool_listed_twice_is_refused(tmp_path: Path) -> None:
    """Review (fixed), the defect: two ``pools`` entries for the same SKU and region validate (quotas get a duplicate
    check, pools do not), and the simulation then depends on their order: quota 16 then 0 and quota 0 then 16 give
    different costs and node launches. It should be refused, naming ``pools[1]``."""
    text = BASE.replace(
        "  on_demand_quota_gpus: 16\n", "  on_demand_quota_gpus: 16\n- sku: h100_80gb\n  on_demand_quota_gpus: 0\n"
    )
    with pytest.raises(ValidationError) as exc:
        load_scenario(_write(tmp_path, text))
    assert "pools" in str(exc.value)


def test_a_planned_run_that_no_set_of_whole_nodes_fits_is_refused(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``ExperimentSpec`` refuses a job size above a node that is not a multiple of the node
    (``size 12 GPUs: must be <= 8 or a multiple of 8``), ``PlannedRun.gpus`` has no such check. A 12-GPU planned run on
    8-GPU H100 nodes validates, and the simulation runs it on one 8-GPU node: gpufleet's cost comes out at 0.674x the
    "hindsight bound", a lower bound it can never beat."""
    text = BASE.split("experiments:", maxsplit=1)[0] + (
        "planned_runs:\n- name: big\n  team: a\n  sku: h100_80gb\n  gpus: 12\n  start_day: 0\n  duration_days: 1\n"
    )
    with pytest.raises(ValidationError) as exc:
        load_scenario(_write(tmp_path, text))
    assert "planned_runs[0].gpus" in str(exc.value) or "planned_runs" in str(exc.value)


def test_an_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    """Review (fixed), the defect: YAML aliases are expanded without any bound. A 9 KB scenario (one pool aliased 1000
    times, each with a reservation list aliased 1000 times) validates as 1,000,000 reservations (3-4 s here; ``--dump``
    prints 38 MB in 85 s), and 27 KB gives 9,000,000: a few KB can take the CLI's or the service's memory. A scenario
    should refuse aliases (or a document larger than sane bounds) with a clear error."""
    n = 1000
    text = (
        "name: t\npools:\n- &p\n  sku: h100_80gb\n  reservations: [&r {gpus: 1, remaining_months: 1}"
        + ", *r" * (n - 1) + "]\n" + "- *p\n" * (n - 1)
    )  # fmt: skip
    path = _write(tmp_path, text)
    assert path.stat().st_size < 10_000
    t0 = time.perf_counter()
    with pytest.raises(ValidationError):
        load_scenario(path)
    assert time.perf_counter() - t0 < 2.0
