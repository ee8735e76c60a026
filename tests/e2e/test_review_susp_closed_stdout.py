"""Review (susp): ``--json`` runs whose standard output is a pipe the reader has closed (``| head -1`` once the head
has its line, ``| true``): the run must not be lost, and no traceback printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_review_benchcli_inputs import _hourly


def _closed_stdout(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run ``gpufleet ARGS`` with stdout a pipe whose reading end is already closed (every write to it fails)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "gpufleet", *map(str, args)], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=240, check=False)  # fmt: skip
    finally:
        os.close(w)


@pytest.mark.parametrize("command", ["forecast", "simulate"])
def test_a_closed_stdout_does_not_lose_the_json(tmp_path: Path, command: str) -> None:
    """Review (fixed), the defect: ``gpufleet forecast ... --json F`` printed each series' quantiles before writing F,
    and ``gpufleet simulate ... --json F`` wrote F after its progress bar printed its last line: with stdout closed
    (a reader such as ``head`` that has stopped) the first print failed and the run ended (exit 1) without F, though
    the house rule is that a failure to print must not lose the run (the bench commands write their files first)."""
    out = tmp_path / "out.json"
    if command == "forecast":
        args: list[str | Path] = ["forecast", "--series", _hourly(tmp_path, hours=21 * 24), "--horizon", "24"]
    else:
        args = ["simulate", "--scenario", "default", "--days", "3"]
    res = _closed_stdout(*args, "--json", out)
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert out.exists(), (res.returncode, res.stderr[-2000:])
    assert json.loads(out.read_text())
