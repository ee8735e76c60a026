"""``gpufleet bench calibrate --data ../shared/data``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.bench.calibrate import calibrate
from gpufleet.cli.cmd_simulate import write_json
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    @user_errors
    def calibrate_cmd(
        data: Annotated[Path, typer.Option(exists=True, file_okay=False, help="the public traces folder")] = Path(
            "../shared/data"
        ),
        json_path: Annotated[Path | None, typer.Option("--json", callback=output_file)] = None,
    ) -> None:
        """Measure the trace statistics that the built-in scenario is calibrated on."""
        r = calibrate(data)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_json(json_path, r)
        con = Console()
        for kind, per in r.items():
            t = Table(title=f"{kind} traces")
            t.add_column("series")
            keys = list(next(iter(per.values())))
            for k in keys:
                t.add_column(k, justify="right")
            for sid, stats in per.items():
                t.add_row(sid, *(f"{stats[k]:.3g}" for k in keys))
            con.print(t)
