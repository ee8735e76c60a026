"""``gpufleet bench cluster-autoscale --seeds 1-5``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.bench.cluster_autoscale import bench_cluster_autoscale
from gpufleet.bench.seeds import parse_seeds
from gpufleet.cli.cmd_simulate import write_json
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file


def register(app: typer.Typer) -> None:
    @app.command("cluster-autoscale")
    @user_errors
    def cluster_autoscale(
        seeds: Annotated[str, typer.Option(help="A-B or a comma list")] = "1-5",
        days: Annotated[int, typer.Option(min=1)] = 60,
        gpus: Annotated[int, typer.Option(min=8)] = 1024,
        json_path: Annotated[Path | None, typer.Option("--json", callback=output_file)] = None,
    ) -> None:
        """Node launches, terminations, cost and pending time: gpufleet's node scaler vs a CA-like baseline."""
        r = bench_cluster_autoscale(parse_seeds(seeds), days, gpus)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_json(json_path, r)
        t = Table(title=f"cluster autoscaler on the steady scenario ({gpus:,} GPUs, {days} days)")
        for c in ("seed", "policy", "launches", "terms", "cost USD", "p95 wait s", "p99 wait s", "GPU-h done"):
            t.add_column(c, justify="right")
        for row in r["rows"]:
            for name in ("gpufleet", "ca_like"):
                x = row[name]
                t.add_row(
                    str(row["seed"]),
                    name,
                    f"{x['node_launches']:,}",
                    f"{x['node_terminations']:,}",
                    f"{x['total_cost_usd']:,.0f}",
                    f"{x['p95_queue_wait_s']:.0f}",
                    f"{x['p99_queue_wait_s']:.0f}",
                    f"{x['allocated_gpu_hours']:,.0f}",
                )
        Console().print(t)
        Console().print(
            f"mean launches ratio {r['launches_ratio_mean']}, mean cost ratio {r['cost_ratio_mean']}, "
            f"mean ratio of cost per allocated GPU-hour {r['cost_per_gpu_hour_ratio_mean']}"
        )
