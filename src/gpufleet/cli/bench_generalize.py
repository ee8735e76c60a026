"""``gpufleet bench generalize``: every stage on every public trace that applies, leave-one-trace-out."""

from __future__ import annotations

import json
import math
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.errors import ValidationError


def register(app: typer.Typer) -> None:
    @app.command("generalize")
    @user_errors
    def bench_generalize(
        data: Annotated[Path, typer.Option("--data", help="directory laid out like ../shared/data")] = Path(
            "../shared/data"
        ),
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the whole table as JSON")
        ] = None,
        markdown_path: Annotated[
            Path | None, typer.Option("--markdown", callback=output_file, help="also write the table here")
        ] = None,
        quick: Annotated[
            bool, typer.Option("--quick", help="fewer traces and seeds, no ServeGen autoscaling replay")
        ] = False,
        stages: Annotated[
            str, typer.Option("--stages", help="comma-separated subset of forecast,procure,autoscale,binpack")
        ] = "forecast,procure,autoscale,binpack",
        reserved_ratio: Annotated[
            str,
            typer.Option(
                "--reserved-ratio",
                help="procurement prices: 'catalog' (h100 list prices), 'min', 'median' or 'max' of the reserved / "
                "on-demand ratios in DATA/prices/aws_gpu_instance_prices.csv, or a number in (0, 1)",
            ),
        ] = "catalog",
        forecast_step: Annotated[
            str,
            typer.Option(
                "--forecast-step",
                help="forecast stage: the series' step, a divisor of an hour from 10min to 1h (e.g. 10min; "
                "default 1h); a file with a coarser step keeps its own",
            ),
        ] = "1h",
    ) -> None:
        """Forecast, procurement, autoscaling and bin-packing vs their baselines on every trace; a setting is
        never judged on a trace that chose it (leave-one-trace-out)."""
        from gpufleet.bench.generalize import STAGES, GeneralizeSettings, markdown, run_generalize

        if json_path and markdown_path and json_path.resolve() == markdown_path.resolve():  # one overwrites the other
            raise ValidationError("--markdown", f"{markdown_path} is also the --json file; give two files")
        chosen = tuple(s.strip() for s in stages.split(",") if s.strip())
        bad = [s for s in chosen if s not in STAGES]
        if bad or not chosen:
            raise ValidationError("stages", f"choose from {', '.join(STAGES)}; got {stages!r}")
        if not data.is_dir():
            raise ValidationError("data", f"not a directory: {data}")
        settings = GeneralizeSettings(
            quick=quick, reserved_ratio=_ratio(data, reserved_ratio), forecast_step_s=_forecast_step(forecast_step)
        )
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        typer.echo(f"{stamp} on {platform.node()} ({platform.machine()}, Python {platform.python_version()})")
        doc = run_generalize(data, settings, chosen, progress=typer.echo)
        if not any(doc[s]["total"] or doc[s].get("skipped") for s in chosen):  # a wrong folder, not a result
            raise ValidationError(
                "data", f"no trace for {', '.join(chosen)} in {data} (laid out like ../shared/data: serving/, ...)"
            )
        doc["config"]["started"] = stamp
        table = markdown(doc)
        if json_path:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(doc, indent=2, default=float) + "\n", "--json")
        if markdown_path:
            write_output(markdown_path, table + "\n", "--markdown")
        typer.echo(table)
        if json_path:
            typer.echo(f"wrote {json_path}")


def _ratio(data: Path, text: str) -> float | None:
    """``--reserved-ratio``: None for the catalog's prices, else the reserved / on-demand price ratio."""
    from gpufleet.bench.generalize_data import reserved_ratio

    if text == "catalog":
        return None
    if text in ("min", "median", "max"):
        return reserved_ratio(data, text)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:  # also NaN
        raise ValidationError(
            "--reserved-ratio", f"expected catalog, min, median, max or a number in (0, 1); got {text!r}"
        )
    return value


def _forecast_step(text: str) -> int:
    """``--forecast-step``: seconds, a divisor of an hour and at least 10 minutes (the finest public series)."""
    from gpufleet.bench.forecast import parse_duration_s

    step = parse_duration_s(text, "--forecast-step")
    if step < 600 or 3600 % step:
        raise ValidationError("--forecast-step", f"must divide an hour and be at least 10min; got {text!r}")
    return step
