"""``gpufleet simulate``: the main job. Runs the closed loop on a scenario and reports.

By default it runs gpufleet's control loop and, on the same world (same seed), the foundation's baseline loop,
so the report shows what gpufleet's policies gain, measured in the same run.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file
from gpufleet.domain.errors import ValidationError
from gpufleet.report.html import write_html_report
from gpufleet.report.summary import print_comparison, print_summary
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.compare import compare, key_figures, versus
from gpufleet.sim.run import LOOPS
from gpufleet.sim.scenario import Scenario, dump_scenario, load_scenario, parse_scenario


class LoopChoice(StrEnum):
    gpufleet = "gpufleet"
    baseline = "baseline"


def resolve_scenario(name: str) -> Scenario:
    if name == "default":
        return default_scenario()
    if not Path(name).exists():
        raise ValidationError("--scenario", f"{name!r} does not exist (and is not 'default', the built-in scenario)")
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
        policy: Annotated[LoopChoice, typer.Option(help="the control loop to report on")] = LoopChoice.gpufleet,
        compare_baseline: Annotated[
            bool, typer.Option("--compare/--no-compare", help="also run the baseline loop on the same world")
        ] = True,
        report: Annotated[
            Path | None, typer.Option(callback=output_file, help="write a self-contained HTML report here")
        ] = None,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the figures as JSON here")
        ] = None,
        dump: Annotated[bool, typer.Option(help="print the scenario as YAML and exit")] = False,
    ) -> None:
        """Simulate a GPU fleet under the closed control loop and summarize cost, utilization and service."""
        sc = resolve_scenario(scenario)
        if days is not None:  # validated like the file's own field (model_copy would not check it)
            sc = parse_scenario({**sc.model_dump(), "days": days}, source="--days")
        if dump:
            typer.echo(dump_scenario(sc), nl=False)
            return
        names = [policy.value]
        if compare_baseline and policy is not LoopChoice.baseline:
            names.append(LoopChoice.baseline.value)
        console = Console()
        with Progress(
            TextColumn("[bold]simulating[/] {task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            tasks = {n: bar.add_task(f"{sc.name}, {sc.days} days, {n} loop", total=1.0) for n in names}
            results = compare(
                sc, {n: LOOPS[n] for n in names}, seed=seed, progress=lambda n, x: bar.update(tasks[n], completed=x)
            )
        result = results[names[0]]
        if len(names) > 1:
            base = results[names[1]]
            result = {**result, "baseline": key_figures(base), "vs_baseline": versus(result, base)}
        print_summary(result, console)
        if "vs_baseline" in result:
            print_comparison(result, console)
        if json_path is not None:
            write_json(json_path, result)
            console.print(f"figures written to {json_path}")
        if report is not None:
            write_html_report(result, report)
            console.print(f"report written to {report}")
