"""``gpufleet bench sched-throughput``: decisions per second and p50/p99 latency on a synthetic cluster."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.bench.sched_throughput import run_throughput
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.errors import ValidationError


def register(app: typer.Typer) -> None:
    @app.command("sched-throughput")
    @user_errors
    def sched_throughput(
        nodes: Annotated[int, typer.Option("--nodes", help="8-GPU nodes (mixed SKUs)")] = 10_000,
        pods: Annotated[int, typer.Option("--pods", help="pod decisions to time")] = 100_000,
        seed: Annotated[int, typer.Option("--seed", min=0)] = 7,
        policy: Annotated[str, typer.Option("--policy")] = "gpufleet",
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the result as JSON here")
        ] = None,
    ) -> None:
        """Time Scheduler.place on a busy cluster (pods churn to stay ~85 % GPU-allocated)."""
        if nodes <= 0 or pods <= 0:
            raise ValidationError("--nodes/--pods", "must be > 0")
        if policy == "fgd":
            raise ValidationError("--policy", "fgd needs a trace distribution; use gpufleet or a baseline")
        r = run_throughput(nodes, pods, seed, policy)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(dataclasses.asdict(r), indent=2) + "\n", "--json")
        Console().print(
            f"{r.policy}: wall {r.decisions_per_s:,.0f} decisions/s, p50 {r.p50_ms:.2f} ms, p99 {r.p99_ms:.2f} ms, "
            f"max {r.max_ms:.0f} ms | CPU time {r.cpu_decisions_per_s:,.0f} decisions/s, p50 {r.cpu_p50_ms:.2f} ms, "
            f"p99 {r.cpu_p99_ms:.2f} ms; placed {r.placed:,}/{r.pods:,} on {r.nodes:,} nodes "
            f"(mean GPU allocation {r.mean_gpu_util_pct:.1f} %)",
            highlight=False,
        )
