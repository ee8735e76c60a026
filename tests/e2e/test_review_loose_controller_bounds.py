"""Review (loose): `gpufleet controller` bounds ``--node-start-s`` and ``--eviction-grace-s`` as a user meets them
(the CLI in a subprocess): an absurd value is a usage error naming the option, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args], check=False, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("option", ["--node-start-s", "--eviction-grace-s"])
@pytest.mark.parametrize("value", ["86401", "1000000000000", "9223372036854775808"])
def test_the_controller_refuses_absurd_node_start_and_eviction_grace(option: str, value: str) -> None:
    """Review (fixed), the defect: ``--node-start-s`` and ``--eviction-grace-s`` had a lower bound only: ``--eviction-grace-s
    9223372036854775808`` (past the API server's int64 gracePeriodSeconds) started a controller whose every eviction
    failed at the API server, and ``--node-start-s 1000000000000`` priced every relaunch and every wait for a node as
    31,000 years. Each is now at most a day, refused at start naming the option."""
    r = _run("controller", option, value, "--kubeconfig", "/nonexistent")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Invalid value for" in r.stderr and f"'{option}'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("option", ["--node-start-s", "--eviction-grace-s"])
def test_the_controller_takes_a_day(option: str) -> None:
    """Review (holds): the bound's edge (a day) passes the option check; the command goes on to the kubeconfig."""
    r = _run("controller", option, "86400", "--kubeconfig", "/nonexistent")
    assert r.returncode == 2 and "--kubeconfig" in r.stderr and "file not found" in r.stderr, r.stderr
    assert "Invalid value for" not in r.stderr and "Traceback" not in r.stderr
