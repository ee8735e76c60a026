"""``gpufleet bench portfolio``: portfolio planning speed at scale and the provider-cap premium."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output

_out = Console(width=130)


def register(app: typer.Typer) -> None:
    @app.command("portfolio")
    @user_errors
    def bench_portfolio(
        pairs: Annotated[int, typer.Option(min=1, help="SKU-region pairs")] = 20,
        days: Annotated[int, typer.Option(min=1, help="Horizon, days (daily grid)")] = 730,
        scenarios: Annotated[int, typer.Option(min=1, help="Demand scenarios")] = 3,
        share_cap: Annotated[float, typer.Option(help="Max share of one provider for the capped run")] = 0.6,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="Write results as JSON here")
        ] = None,
    ) -> None:
        """Solve a synthetic 2-year, 20-pair, 4-tier daily plan twice (uncapped, provider-capped)."""
        from gpufleet.bench.portfolio import run

        doc = run(n_pairs=pairs, n_days=days, n_scenarios=scenarios, share_cap=share_cap)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(doc, indent=2), "--json")
        _out.print_json(json.dumps(doc))
