"""``gpufleet simulate``: the main job. Runs every control loop on the same world and reports the comparison.

The figures are one document (schema ``gpufleet.comparison/1``, see docs/scenario.md and the contract in
sim/compare.py): every loop's full summary (with its decision log), the hindsight bound when the run has one
(a lower bound on the cost of the realized demand, not a policy) and each loop's cost ratios. The terminal, the
HTML report and ``--json`` all show that one document.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.domain.errors import ValidationError
from gpufleet.report.html import write_html_report
from gpufleet.report.summary import print_report
from gpufleet.sim.compare import run_loops
from gpufleet.sim.run import LOOPS
from gpufleet.sim.scenario import dump_scenario, parse_scenario


def json_safe(x: Any) -> Any:
    """NaN and infinities become null (JSON has no such numbers); everything else is kept."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def write_json(path: Path, data: dict[str, Any], option: str = "--json") -> None:
    """The figures as JSON, written atomically (``cli.paths.write_output``)."""
    write_output(path, json.dumps(json_safe(data), indent=1, sort_keys=True, allow_nan=False) + "\n", option)


def parse_loops(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOOPS]
    if not names:
        raise ValidationError("--loops", f"no loop given; choose from {', '.join(LOOPS)}")
    if unknown:
        raise ValidationError(
            "--loops", f"unknown loop {', '.join(map(repr, unknown))}; choose from {', '.join(LOOPS)}"
        )
    return names


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def simulate(
        scenario: Annotated[
            str, typer.Option(help="a built-in scenario (default, steady) or a scenario YAML file")
        ] = "default",
        days: Annotated[int | None, typer.Option(min=1, help="override the scenario's days")] = None,
        seed: Annotated[int | None, typer.Option(min=0, help="override the scenario's seed")] = None,
        loops: Annotated[
            str | None, typer.Option(help=f"comma-separated loops to run (default: all of {', '.join(LOOPS)})")
        ] = None,
        report: Annotated[
            Path | None, typer.Option(callback=output_file, help="write a self-contained HTML report here")
        ] = None,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the comparison as JSON here")
        ] = None,
        dump: Annotated[bool, typer.Option(help="print the scenario as YAML and exit")] = False,
    ) -> None:
        """Simulate a GPU fleet under every control loop on the same world; report cost, utilization, service
        and what gpufleet decided."""
        sc = resolve_scenario(scenario)
        if days is not None:  # validated like the file's own field (model_copy would not check it)
            sc = parse_scenario({**sc.model_dump(), "days": days}, source="--days")
        if dump:
            typer.echo(dump_scenario(sc), nl=False)
            return
        names = parse_loops(loops) or list(LOOPS)
        seed_ = sc.seed if seed is None else seed
        console = Console()
        with Progress(
            TextColumn("[bold]simulating[/] {task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            tasks = {n: bar.add_task(escape(f"{sc.name}, {sc.days} days, {n} loop"), total=1.0) for n in names}
            doc = run_loops(sc, seed_, names, progress=lambda n, x: bar.update(tasks[n], completed=x))
            # the files first, before the bar's last line: a failure to print (a closed stdout) must not lose the run
            if json_path is not None:
                write_json(json_path, doc)
            if report is not None:
                write_html_report(doc, report)
        print_report(doc, console)
        if json_path is not None:
            console.print(f"figures written to {escape(str(json_path))}")
        if report is not None:
            console.print(f"report written to {escape(str(report))}")
