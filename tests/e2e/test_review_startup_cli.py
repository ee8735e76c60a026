"""Review (startup): settings read at start by `gpufleet controller` and `gpufleet serve`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app


def test_the_controller_warns_about_a_misspelled_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review (fixed), the defect: `gpufleet controller` never looked at the GPUFLEET_* variables, so a misspelt
    one (GPUFLEET_DB_ULR for the store the controller reads with --cluster) was ignored without a word, while `serve`
    warns about it. Now it warns the same way, first thing."""
    monkeypatch.setenv("GPUFLEET_DB_ULR", "postgresql+psycopg://u@db:5432/g")
    res = CliRunner().invoke(app, ["controller"])  # no --kubeconfig: refused (exit 2) after the warning
    assert res.exit_code == 2, res.output
    assert "GPUFLEET_DB_ULR is not a gpufleet setting" in res.output


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GPUFLEET_RECONCILE_INTERVAL_S", "inf"),
        ("GPUFLEET_RECONCILE_INTERVAL_S", "1e300"),
        ("GPUFLEET_PLAN_INTERVAL_S", "inf"),
        ("GPUFLEET_PLAN_INTERVAL_S", "1e300"),
        ("GPUFLEET_PLAN_INTERVAL_S", "nan"),
        ("GPUFLEET_RECONCILE_INTERVAL_S", "90000"),
    ],
)
def test_absurd_intervals_are_refused_naming_the_variable(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: ``reconcile_interval_s`` and ``plan_interval_s`` took ``inf`` and ``1e300``: the
    leader's periodic reconcile (and the planning pass) then never ran again after the start-up pass, the service
    looked healthy and silently stopped submitting approvals and planning. Now refused at start (finite, at most a
    day / 366 days), one line naming the variable."""
    monkeypatch.setenv(variable, value)
    res = CliRunner().invoke(app, ["db", "upgrade", "--db", f"sqlite:///{tmp_path / 'g.db'}"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and variable in lines[0], res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "option",
    [
        "--checkpoint-timeout-s",
        "--meter-every-s",
        "--node-limits-every-s",
        "--health-stale-s",
        "--scale-every-s",
        "--scale-round-s",
        "--scale-history-s",
        "--react-every-s",
    ],
)
@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_the_controller_refuses_infinite_periods_and_timeouts(option: str, value: str) -> None:
    """Review (fixed), the defect: `gpufleet controller` bounded some periods (``--consolidate-every-s``,
    ``--release-every-s``, ``--sync-every-s``: at most a day) but not these: ``inf`` passed, so the metering or the
    NodePool limits never ran again (without a word), ``--health-stale-s inf`` made /healthz never fail (the liveness
    probe could no longer restart a stuck loop) and ``--checkpoint-timeout-s inf`` let one eviction wait for a pod's
    checkpoint forever. Now each is refused at start as a usage error naming the option (at most a day; the
    rate history 366 days)."""
    res = CliRunner().invoke(app, ["controller", option, value, "--kubeconfig", "/nonexistent"])
    assert res.exit_code == 2, res.output
    assert "Invalid value for" in res.output and f"'{option}'" in res.output, res.output  # click's usage error
