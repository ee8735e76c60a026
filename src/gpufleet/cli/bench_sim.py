"""``gpufleet bench sim --gpus 10000 --days 365``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.bench.sim import bench_sim
from gpufleet.cli.cmd_simulate import write_json
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file


def register(app: typer.Typer) -> None:
    @app.command("sim")
    @user_errors
    def sim(
        gpus: Annotated[int, typer.Option(min=8, help="fleet size in GPUs")] = 10_000,
        days: Annotated[int, typer.Option(min=1, help="simulated days")] = 365,
        seed: Annotated[int, typer.Option(min=0)] = 7,
        min_jobs: Annotated[int, typer.Option(min=0, help="at least this many training jobs")] = 1_000_000,
        json_path: Annotated[Path | None, typer.Option("--json", callback=output_file)] = None,
    ) -> None:
        """Simulate a large fleet for a long time; print jobs, events, wall seconds, events per second."""
        r = bench_sim(gpus, days, seed, min_jobs)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_json(json_path, r)
        t = Table(title=f"bench sim: {gpus:,} GPUs, {days} days")
        for k in (
            "jobs",
            "events",
            "wall_s",
            "cpu_s",
            "events_per_s",
            "jobs_per_s",
            "gpu_utilization",
            "cost_conserved",
        ):
            v = r[k]
            t.add_row(k, str(v) if isinstance(v, bool) else f"{v:,}" if isinstance(v, int) else str(v))
        Console().print(t)
