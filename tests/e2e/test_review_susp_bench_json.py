"""Review (susp): the ``--json`` file of ``gpufleet bench ...`` as a user runs it: pointed at an input file, and
when the write fails half-way (a full disk, here a file-size limit on the process)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_review_benchcli_inputs import NODES, PODS, _hourly


def _gpufleet(*args: str | Path, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # the file-size limit of a nearly full disk (Python ignores SIGXFSZ: the write fails)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "gpufleet", *map(str, args)], capture_output=True, text=True,
                          timeout=240, check=False, preexec_fn=limit, env=env)  # fmt: skip


def _binpack_inputs(tmp_path: Path) -> tuple[Path, Path]:
    (nodes := tmp_path / "n.csv").write_text(NODES + "n1,64000,262144,8,V100M16\nn2,64000,262144,8,V100M16\n")
    (pods := tmp_path / "p.csv").write_text(PODS + "p1,1000,1024,1,500,\np2,1000,1024,1,1000,\n")
    return nodes, pods


@pytest.mark.parametrize("bench", ["forecast", "binpack-nodes", "binpack-pods"])
def test_a_json_output_that_is_an_input_file_is_refused(tmp_path: Path, bench: str) -> None:
    """Review (fixed), the defect: ``bench forecast --series F --json F`` (or ``bench binpack --nodes F --json F``)
    read F, then replaced the user's data with the benchmark's JSON: the input is lost, silently (exit 0). Expected:
    refused before the run (exit 2, one ``error:`` line naming ``--json`` and the input option), the input intact."""
    if bench == "forecast":
        series = _hourly(tmp_path, hours=21 * 24)
        args: list[str | Path] = ["forecast", "--series", series, "--horizon", "24", "--models", "seasonal_naive"]
        target, option = series, "--series"
    else:
        nodes, pods = _binpack_inputs(tmp_path)
        args = ["binpack", "--nodes", nodes, "--pods", pods, "--seeds", "1", "--policy", "bestfit"]
        target, option = (nodes, "--nodes") if bench == "binpack-nodes" else (pods, "--pods")
    before = target.read_bytes()
    res = _gpufleet("bench", *args, "--json", tmp_path / "." / target.name)  # another spelling of the same file
    assert target.read_bytes() == before
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "error:" in res.stderr and "--json" in res.stderr and option in res.stderr


def test_a_json_write_that_fails_keeps_the_previous_file(tmp_path: Path) -> None:
    """Review (fixed), the defect: the JSON was written in place (``Path.write_text``): a write that fails half-way
    (disk full, quota, a file-size limit) left the previous run's file truncated, neither the old result nor the
    new, and the command ended with an ``OSError`` traceback. Expected: the new file is written beside and renamed
    over the old one (atomic), a failed write leaves the old file whole, the error is one line naming ``--json``."""
    nodes, pods = _binpack_inputs(tmp_path)
    out = tmp_path / "result.json"
    args = ["bench", "binpack", "--nodes", nodes, "--pods", pods, "--seeds", "1", "--json", out]
    first = _gpufleet(*args, "--policy", "bestfit")
    assert first.returncode == 0, first.stderr[-2000:]
    kept = out.read_bytes()
    assert json.loads(kept)
    again = _gpufleet(*args, "--policy", "all", fsize=len(kept) // 2)  # a bigger result on a nearly full disk
    assert out.read_bytes() == kept
    assert again.returncode == 2, (again.returncode, again.stderr[-2000:])
    assert "Traceback" not in again.stderr and "error:" in again.stderr and "--json" in again.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left behind
