"""``gpufleet bench procure-sim``: procurement in the closed loop on the built-in scenario, vs the baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli.errors import user_errors

_out = Console(width=130)


def register(app: typer.Typer) -> None:
    @app.command("procure-sim")
    @user_errors
    def bench_procure_sim(
        seed: Annotated[int | None, typer.Option(help="Seed (default: the scenario's)")] = None,
        days: Annotated[int | None, typer.Option(min=1, help="Simulated days (default: the scenario's)")] = None,
        json_path: Annotated[Path | None, typer.Option("--json", help="Write results as JSON here")] = None,
    ) -> None:
        """Baseline loop, gpufleet loop, gpufleet loop + break-even procurer: same scenario, same seed."""
        from gpufleet.bench.procure_sim import run

        doc = run(seed=seed, days=days)
        for name, f in doc["loops"].items():
            _out.print(
                f"{name:28s} total ${f['total_cost_usd']:>14,.2f}  vs baseline {f['cost_vs_baseline']:.4f}  "
                f"reserved GPUs bought {f['gpus_bought']}  idle reserved ${f['idle_reserved_cost_usd']:,.0f}"
            )
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(doc, indent=2))
