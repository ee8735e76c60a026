"""``gpufleet bench k8s``: binds per second through a real API server (see gpufleet.bench.k8s)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.errors import ValidationError


def register(app: typer.Typer) -> None:
    @app.command("k8s")
    @user_errors
    def bench_k8s(
        nodes: Annotated[int, typer.Option("--nodes", min=1)] = 1000,
        pods: Annotated[int, typer.Option("--pods", min=1)] = 5000,
        kubeconfig: Annotated[
            Path | None, typer.Option("--kubeconfig", help="existing cluster (default: start one)")
        ] = None,
        apiserver: Annotated[Path, typer.Option("--apiserver", help="kube-apiserver .xz to start")] = Path(
            "../shared/k8s/kube-apiserver-v1.20.2.xz"
        ),
        workers: Annotated[int, typer.Option("--bind-workers", min=1, max=256)] = 16,
        seed: Annotated[int, typer.Option("--seed", min=0)] = 7,
        json_path: Annotated[Path | None, typer.Option("--json", callback=output_file)] = None,
    ) -> None:
        """Bind pending GPU pods on simulated nodes through the Binding API; report binds/s, p50/p99."""
        from gpufleet.bench.k8s import run_k8s_bench

        if kubeconfig is None and not apiserver.is_file():
            raise ValidationError("--apiserver", f"file not found: {apiserver} (or pass --kubeconfig)")
        if kubeconfig is not None:  # a missing or broken file, or a server that does not answer: named, at once
            from gpufleet.cli.cmd_controller import connect

            connect(kubeconfig, in_cluster=False)
        r = run_k8s_bench(nodes, pods, kubeconfig=kubeconfig, apiserver_xz=apiserver, seed=seed, bind_workers=workers)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(dataclasses.asdict(r), indent=2) + "\n", "--json")
        Console().print(
            f"{r.binds} binds in {r.tick_wall_s:.2f} s: {r.binds_per_s:,.0f} binds/s, p50 {r.p50_ms:.1f} ms, "
            f"p99 {r.p99_ms:.1f} ms ({r.bind_workers} workers, {r.api_server}); in-process "
            f"{r.in_process_decisions_per_s:,.0f} decisions/s",
            highlight=False,
        )
