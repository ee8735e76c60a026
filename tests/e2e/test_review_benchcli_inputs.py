"""Review: the ``gpufleet bench ...`` commands as a user runs them (argument handling and input files).

Every case runs ``python -m gpufleet bench ...`` in a subprocess on tiny files made under ``tmp_path`` and checks
the exit code, the error line (naming the option, or the file and line) and that no traceback is printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpufleet.bench.seeds import parse_seeds
from gpufleet.domain.errors import ValidationError

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
OPENB_PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
SERIES = "timestamp,series_id,value\n"


def _bench(*args: str | Path, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "bench", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=240,
        check=False,
    )


def _refused(res: subprocess.CompletedProcess[str], *named: str) -> None:
    """Exit 2, an ``error:`` line naming everything in ``named``, no traceback."""
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "error:" in res.stderr, res.stderr[-2000:]
    for text in named:
        assert text in res.stderr, (text, res.stderr[-2000:])


def _hourly(tmp_path: Path, hours: int = 72, sid: str = "a") -> Path:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    f = tmp_path / "series.csv"
    f.write_text(SERIES + "".join(f"{(t0 + timedelta(hours=h)).isoformat()},{sid},{5 + h % 7}\n" for h in range(hours)))
    return f


def test_a_repeated_seed_is_refused() -> None:
    """Review (fixed), the defect: ``--seeds 1,1`` ran the same seed twice and reported a mean, an sd and a 95% CI
    over copies of one sample (``bench loop`` printed "95% CI 0.953-0.953") as if there were two seeds."""
    for spec in ("1,1", "3, 4,3", "7,7,7"):
        with pytest.raises(ValidationError, match="repeated"):
            parse_seeds(spec)
    assert parse_seeds("3,1") == [3, 1]


def test_bench_binpack_refuses_a_repeated_seed(tmp_path: Path) -> None:
    """Review (fixed), the defect: see test_a_repeated_seed_is_refused; end to end on ``bench binpack``."""
    (tmp_path / "n.csv").write_text(NODES + "n1,64000,262144,8,V100M16\n")
    (tmp_path / "p.csv").write_text(PODS + "p1,1000,1024,1,500,\n")
    res = _bench("binpack", "--nodes", tmp_path / "n.csv", "--pods", tmp_path / "p.csv", "--seeds", "1,1",
                 "--policy", "bestfit")  # fmt: skip
    _refused(res, "--seeds", "repeated")


@pytest.mark.parametrize("row", ["n1,1e30,262144,8,V100M16", "n1,64000,1e30,8,V100M16", "n1,64000,262144,3e9,V100M16"])
def test_bench_binpack_refuses_a_huge_node_cell_with_its_line(tmp_path: Path, row: str) -> None:
    """Review (fixed), the defect: a node list cell far past any real node (1e30 milli-CPUs, 3e9 GPUs) was read as
    is and overflowed NumPy's integers when the node table was built (OverflowError traceback); the other two
    node inventories already bounded their cells."""
    nodes = tmp_path / "n.csv"
    nodes.write_text(NODES + "n0,64000,262144,8,V100M16\n" + row + "\n")
    (tmp_path / "p.csv").write_text(PODS + "p1,1000,1024,1,500,\n")
    res = _bench("binpack", "--nodes", nodes, "--pods", tmp_path / "p.csv", "--seeds", "1", "--policy", "bestfit")
    _refused(res, f"{nodes}:3")


@pytest.mark.parametrize(
    ("name", "header", "good", "short"),
    [
        ("nodes", NODES, "n1,64000,262144,8,V100M16", "n2,64000"),
        ("pods", PODS, "p1,1000,1024,1,500,", "p2,1000,1024"),
    ],
)
def test_bench_binpack_refuses_a_truncated_row(tmp_path: Path, name: str, header: str, good: str, short: str) -> None:
    """Review (fixed), the defect: a row cut short (a truncated file's last line) had its missing cells read as 0,
    so ``p2,1000,1024`` became a CPU-only pod and ``n2,64000`` a node without GPUs or memory, silently."""
    files = {"nodes": NODES + "n1,64000,262144,8,V100M16\n", "pods": PODS + "p1,1000,1024,1,500,\n"}
    files[name] = header + good + "\n" + short + "\n"
    for k, text in files.items():
        (tmp_path / f"{k}.csv").write_text(text)
    res = _bench("binpack", "--nodes", tmp_path / "nodes.csv", "--pods", tmp_path / "pods.csv", "--seeds", "1",
                 "--policy", "bestfit")  # fmt: skip
    _refused(res, f"{tmp_path / f'{name}.csv'}:3", "fields")


def test_bench_autoscale_refuses_an_azure_row_with_an_extra_field(tmp_path: Path) -> None:
    """Review (fixed), the defect: an Azure trace row with one field too many made pandas raise ParserError, a
    traceback instead of an error naming the file and line."""
    trace = tmp_path / "az.csv"
    trace.write_text(AZURE + "2023-11-16 18:15:46.6,374,44\n2023-11-16 18:15:50.9,396,109,7\n")
    res = _bench("autoscale", "--trace", trace, "--no-oracle")
    _refused(res, f"{trace}:3")


def test_bench_autoscale_refuses_series_on_a_file_without_series(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``--series`` (only this series_id of a series file) was silently ignored on an
    Azure request trace: the whole trace was replayed as if it had been filtered."""
    trace = tmp_path / "az.csv"
    trace.write_text(AZURE + "".join(f"2023-11-16 18:15:{s:02d}.0,300,20\n" for s in range(20)))
    res = _bench("autoscale", "--trace", trace, "--no-oracle", "--series", "m-large")
    _refused(res, "series")


@pytest.mark.parametrize("group", [False, True])
def test_bench_forecast_refuses_a_short_request_log_row(tmp_path: Path, group: bool) -> None:
    """Review (fixed), the defect: a request log row without the time column's cell (``--time-column``) crashed
    with AttributeError ('NoneType' object has no attribute 'strip') instead of naming the file and line."""
    log = tmp_path / "log.csv"
    log.write_text("id,ts,model\n1,2024-01-01T00:00:00Z,a\n2,2024-01-01T00:10:00Z,b\n3\n")
    extra = ["--group-column", "model"] if group else []
    res = _bench("forecast", "--series", log, "--time-column", "ts", *extra, "--horizon", "1", "--models", "naive")
    _refused(res, f"{log}:4")


def test_bench_forecast_refuses_group_column_without_time_column(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``--group-column`` (with --time-column: also one series per top group) was
    silently ignored without ``--time-column``."""
    res = _bench("forecast", "--series", _hourly(tmp_path), "--horizon", "4", "--models", "naive",
                 "--group-column", "model")  # fmt: skip
    _refused(res, "--group-column", "--time-column")


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ("p3,4000,16384,1", ":4"),  # cut short
        ("p3,4000,16384,1,500,,LS,Running,soon,90000,0", ":4"),  # not a number
    ],
)
def test_bench_procure_names_the_line_of_a_bad_pod_list_row(tmp_path: Path, row: str, named: str) -> None:
    """Review (fixed), the defect: an OpenB pod list given to ``bench procure --demand`` (or found by ``bench
    generalize``) with a row cut short crashed with TypeError; a non-numeric time was refused without its line."""
    pods = tmp_path / "openb_pod_list_default.csv"
    body = "p1,4000,16384,1,500,,LS,Running,0,7200,0\np2,4000,16384,1,500,,LS,Running,100,90000,100\n"
    pods.write_text(OPENB_PODS + body + row + "\n")
    res = _bench("procure", "--demand", pods)
    _refused(res, f"{pods}{named}")


def test_bench_generalize_refuses_a_directory_without_any_trace(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``--data`` naming a directory that holds none of the traces (an empty folder,
    or ``../shared`` for ``../shared/data``) ran every stage on nothing and exited 0 with ``0/0 pass``."""
    (tmp_path / "empty").mkdir()
    res = _bench("generalize", "--data", tmp_path / "empty", "--quick", "--json", tmp_path / "g.json")
    _refused(res, "data", "no trace")
    assert not (tmp_path / "g.json").exists()


def test_bench_forecast_refuses_a_model_list_with_nothing_to_run(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``--models prophet`` without the prophet package ran nothing and exited 0 with
    empty tables."""
    from gpufleet.bench.forecast import prophet_available

    if prophet_available():
        pytest.skip("prophet is installed here")
    res = _bench("forecast", "--series", _hourly(tmp_path), "--horizon", "4", "--models", "prophet")
    _refused(res, "models", "prophet")


@pytest.mark.parametrize("what", ["missing", "garbage"])
def test_bench_k8s_refuses_a_bad_kubeconfig(tmp_path: Path, what: str) -> None:
    """Review (fixed), the defect: ``--kubeconfig`` naming a missing file or a file that is not a kubeconfig
    crashed in the Kubernetes client (ConfigException / TypeError traceback) instead of an error naming it."""
    cfg = tmp_path / "kubeconfig"
    if what == "garbage":
        cfg.write_text("just some text\n")
    res = _bench("k8s", "--kubeconfig", cfg, "--nodes", "1", "--pods", "1")
    _refused(res, "--kubeconfig")


@pytest.mark.parametrize(
    "args",
    [
        ["binpack", "--nodes", "{d}/n.csv", "--pods", "{d}/p.csv", "--seeds", "1", "--policy", "bestfit"],
        ["procure", "--demand", "{d}/series.csv"],
        ["cluster-autoscale", "--seeds", "1", "--days", "1", "--gpus", "8"],
        ["sim", "--gpus", "8", "--days", "1", "--min-jobs", "0"],
        ["cost", "--gpus", "8", "--days", "1", "--baseline-samples", "1000"],
        ["sched-throughput", "--nodes", "1", "--pods", "1"],
    ],
    ids=lambda a: a[0],
)
def test_a_failure_to_print_the_tables_does_not_lose_the_json(tmp_path: Path, args: list[str]) -> None:
    """Review (fixed), the defect: the ``--json`` file was written after the tables were printed, so when printing
    failed (stdout a full disk or a closed pipe, ``| head``) the whole run was lost; ``bench loop`` already wrote
    first."""
    (tmp_path / "n.csv").write_text(NODES + "n1,64000,262144,8,V100M16\n")
    (tmp_path / "p.csv").write_text(PODS + "p1,1000,1024,1,500,\n")
    _hourly(tmp_path)
    out = tmp_path / "out.json"
    with open("/dev/full", "w") as full:  # every write to stdout fails with ENOSPC
        _bench(*[a.format(d=tmp_path) for a in args], "--json", out, stdout=full.fileno())
    assert out.exists(), "the run's JSON was lost"
    assert json.loads(out.read_text())


@pytest.mark.parametrize("bench", ["forecast", "generalize"])
def test_json_and_markdown_to_the_same_file_are_refused(tmp_path: Path, bench: str) -> None:
    """Review (fixed), the defect: ``--json F --markdown F`` wrote one over the other after the whole run, so one of
    the two results was lost without a word."""
    out = tmp_path / "out.txt"
    if bench == "forecast":
        args: list[str | Path] = ["--series", _hourly(tmp_path), "--horizon", "4", "--models", "naive"]
    else:
        args = ["--data", tmp_path, "--quick"]
    res = _bench(bench, *args, "--json", out, "--markdown", out)
    _refused(res, "--markdown", "--json")
    assert not out.exists()


def test_bench_binpack_runs_a_policy_named_twice_once(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``--policy bestfit,bestfit`` ran the policy twice per seed and summarised both
    runs as one policy, so its mean and sd were over copies (the JSON listed each seed twice)."""
    (tmp_path / "n.csv").write_text(NODES + "n1,64000,262144,8,V100M16\n")
    (tmp_path / "p.csv").write_text(PODS + "p1,1000,1024,1,500,\n")
    out = tmp_path / "b.json"
    res = _bench("binpack", "--nodes", tmp_path / "n.csv", "--pods", tmp_path / "p.csv", "--seeds", "1,2",
                 "--policy", "bestfit,bestfit", "--json", out)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(out.read_text())["policies"]["bestfit"]["seeds"] == [1, 2]
