"""``gpufleet controller`` refuses a packing policy it cannot run before it connects or takes the Lease."""

from __future__ import annotations

from typer.testing import CliRunner

from gpufleet.cli.main import app


def test_fgd_and_unknown_policies_are_refused_at_start() -> None:
    for bad in ("fgd", "nope"):
        res = CliRunner().invoke(app, ["controller", "--policy", bad, "--kubeconfig", "/nonexistent"])
        assert res.exit_code == 2 and "--policy" in res.output, res.output  # before: a traceback at the first tick
