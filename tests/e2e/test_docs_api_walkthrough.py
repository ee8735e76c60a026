"""docs/api.md works as written: its bash blocks run, in order, against a real `gpufleet serve`."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
def test_reservation_walkthrough_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    text = (REPO / "docs" / "api.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 8
    script = "set -euo pipefail\n" + "\n".join(blocks)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    launcher = bindir / "gpufleet"  # the installed console script, bound to this checkout's sources
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "from gpufleet.cli.main import main; main()" "$@"\n')
    launcher.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO / "src"),
        "PORT": str(_free_port()),
    }
    env.pop("GPUFLEET_DB_URL", None)
    # a hang guard below pytest's 300 s: the script starts the CLI about ten times (~4 CPU-s of imports each on a
    # slow core), which took 96 s and then over 120 s beside a second xdist worker on a loaded 2-core machine
    proc = subprocess.run(
        ["bash", "-c", script], check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=270
    )
    out = proc.stdout
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{proc.stderr}"
    lines = out.splitlines()
    assert lines[0].endswith("-> 0021_placement_admission_release")  # gpufleet db upgrade
    assert '"status":"ready"' in lines[1]
    assert lines.count("submitted_to_cloud") == 2
    assert "pending_approval" in lines
    # section 8: plans:propose creates what the loop's procurer proposes, on the reserved pool's 12-month term
    assert any(re.fullmatch(r"pending_approval [1-9]\d* 12 2", line) for line in lines)
    # section 8: a registered run the pay-per-use tiers cannot carry is reserved ahead of; cancelled, it is not read
    assert "scheduled 256 0.8 1209600" in lines and "cancelled" in lines
    assert "runs read: 1 ['planned_run_reserve'] True" in lines and "runs read: 0" in lines
    assert "['pending_approval']" in lines  # the run lists the reservation bought ahead of it
    assert any('"status":409' in line for line in lines)
    assert any('"field":"units"' in line for line in lines)
    bad_json = "body: invalid JSON at character 19: Expecting property name enclosed in double quotes"
    assert lines[-5:] == ["start", bad_json, "415", "401", "403"]
    # section 7: cost through the cost package, a rightsizing change applied and rolled back, the dashboard's scope
    assert "applied" in lines and "rolled_back" in lines and "search ['search']" in lines
    assert "gpufleet_fleet_cost_usd 2641.92" in lines
    # section 8: a team budget degrades, then queues, and both decisions are audited; a bad --ttl exits 2
    assert "500.0 0.0 True" in lines
    assert any(line.startswith("degrade over_budget_degraded 2 ") for line in lines)
    assert any(line.startswith("queue over_budget_queued None ") and line.endswith(" True") for line in lines)
    assert "bob budget.admission queue over_budget_queued" in lines
    assert "exit 2" in lines
    # section 8: an admission retried under its Idempotency-Key answers the same and books its 8 GPUs once
    admitted = lines.index("admitted place aws/us-east-1/l40s/on_demand 8")
    assert lines[admitted : admitted + 3] == [lines[admitted]] * 2 + ["8"]
    # ... and released, its 8 GPUs go back to the pool
    assert lines[admitted + 3 : admitted + 5] == ["released aws/us-east-1/l40s/on_demand 8", "0"]
