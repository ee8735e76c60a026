"""``gpufleet bench loop --seeds 1-5``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.bench.loop import bench_loop
from gpufleet.bench.seeds import parse_seeds
from gpufleet.cli.cmd_simulate import write_json
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file


def register(app: typer.Typer) -> None:
    @app.command("loop")
    @user_errors
    def loop(
        seeds: Annotated[str, typer.Option(help="A-B or a comma list")] = "1-5",
        days: Annotated[int, typer.Option(min=1)] = 60,
        gpus: Annotated[int, typer.Option(min=8)] = 1024,
        json_path: Annotated[Path | None, typer.Option("--json", callback=output_file)] = None,
    ) -> None:
        """gpufleet's control loop vs the baseline loop on the default scenario, per seed and on average."""
        r = bench_loop(parse_seeds(seeds), days, gpus)
        t = Table(title=f"gpufleet vs baseline loop: default scenario, {gpus:,} GPUs, {days} days")
        for c in ("seed", "cost ratio", "node launches ratio", "SLO delta", "p95 wait delta (s)"):
            t.add_column(c, justify="right")
        for row in r["rows"]:
            t.add_row(
                str(row["seed"]),
                str(row["cost_ratio"]),
                str(row["node_launches_ratio"]),
                str(row["slo_delta"]),
                str(row["p95_queue_wait_delta_s"]),
            )
        cr, nl = r["cost_ratio"], r["node_launches_ratio"]
        t.add_row(
            "mean (sd)",
            f"{cr['mean']} ({cr['sd']})",
            f"{nl['mean']} ({nl['sd']})",
            str(r["slo_delta"]["mean"]),
            str(r["p95_queue_wait_delta_s"]["mean"]),
        )
        Console().print(t)
        if json_path is not None:
            write_json(json_path, r)
