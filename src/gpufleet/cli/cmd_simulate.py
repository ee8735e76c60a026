"""``gpufleet simulate``: the main job. Runs the closed loop on a scenario and reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli.errors import user_errors
from gpufleet.report.html import write_html_report
from gpufleet.report.summary import print_summary
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.run import simulate as run_sim
from gpufleet.sim.scenario import Scenario, dump_scenario, load_scenario


def resolve_scenario(name: str) -> Scenario:
    if name == "default":
        return default_scenario()
    return load_scenario(name)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def simulate(
        scenario: Annotated[str, typer.Option(help="'default' or a scenario YAML file")] = "default",
        days: Annotated[int | None, typer.Option(min=1, help="override the scenario's days")] = None,
        seed: Annotated[int | None, typer.Option(min=0, help="override the scenario's seed")] = None,
        report: Annotated[Path | None, typer.Option(help="write a self-contained HTML report here")] = None,
        json_path: Annotated[Path | None, typer.Option("--json", help="write the figures as JSON here")] = None,
        dump: Annotated[bool, typer.Option(help="print the scenario as YAML and exit")] = False,
    ) -> None:
        """Simulate a GPU fleet under the closed control loop and summarize cost, utilization and service."""
        sc = resolve_scenario(scenario)
        if dump:
            typer.echo(dump_scenario(sc), nl=False)
            return
        console = Console()
        total_days = days or sc.days
        with Progress(
            TextColumn("[bold]simulating[/] {task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task(f"{sc.name}, {total_days} days", total=1.0)
            _world, result = run_sim(sc, seed=seed, days=days, progress=lambda x: bar.update(task, completed=x))
        print_summary(result, console)
        if json_path is not None:
            write_json(json_path, result)
            console.print(f"figures written to {json_path}")
        if report is not None:
            write_html_report(result, report)
            console.print(f"report written to {report}")
