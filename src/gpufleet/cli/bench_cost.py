"""``gpufleet bench cost --gpus 10000 --days 30``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.bench.cost import bench_cost
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output


def register(app: typer.Typer) -> None:
    @app.command("cost")
    @user_errors
    def cost(
        gpus: Annotated[int, typer.Option(min=8, help="fleet size in GPUs (a multiple of 8)")] = 10_000,
        days: Annotated[int, typer.Option(min=1, help="days of samples")] = 30,
        step_s: Annotated[int, typer.Option(min=1, max=86_400, help="sample interval in seconds")] = 300,
        seed: Annotated[int, typer.Option(min=0)] = 0,
        baseline_samples: Annotated[int, typer.Option(min=1000, help="samples the naive loop meters")] = 2_000_000,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the results as JSON")
        ] = None,
    ) -> None:
        """Meter a month of 5-minute per-GPU samples; columnar vs a naive per-record loop (same run)."""
        r = bench_cost(gpus, days, step_s, seed, baseline_samples)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(r, indent=2) + "\n", "--json")
        t = Table(title=f"bench cost: {gpus:,} GPUs, {days} days, {step_s} s samples")
        t.add_column("measure")
        t.add_column("value", justify="right")
        for k, v in r.items():
            t.add_row(k, f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v))
        Console().print(t)
