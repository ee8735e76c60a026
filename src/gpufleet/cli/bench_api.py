"""``gpufleet bench api``: API latency/throughput with PostgreSQL behind the server (see gpufleet.bench.api)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output


def register(app: typer.Typer) -> None:
    @app.command("api")
    @user_errors
    def bench_api(
        pg_url: Annotated[str, typer.Option(help="PostgreSQL URL; a scratch schema is created and dropped")] = (
            "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        rate: Annotated[float, typer.Option(help="Open-loop rate for placement and the floor, req/s")] = 200.0,
        forecast_rate: Annotated[float, typer.Option(help="Open-loop rate for the forecast, req/s")] = 50.0,
        duration_s: Annotated[float, typer.Option(help="Seconds per open-loop phase")] = 15.0,
        saturation_s: Annotated[float, typer.Option(help="Seconds per closed-loop saturation phase")] = 5.0,
        processes: Annotated[
            int, typer.Option(help="gpufleet serve processes on the one schema; the load alternates over them")
        ] = 1,
        json_out: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="Write the results as JSON here")
        ] = None,
    ) -> None:
        """Measure p50/p99 and throughput of placement and forecast (target: placement p99 <= 50 ms at 200/s)."""
        from gpufleet.bench import api as bench
        from gpufleet.domain.errors import ValidationError

        if not 0 < rate <= 2000 or not 0 < forecast_rate <= 2000:
            raise ValidationError("rate", "must be in (0, 2000] req/s")
        if not 0 < duration_s <= 120 or not 0 < saturation_s <= 60:
            raise ValidationError("duration_s", "phases are bounded: duration <= 120 s, saturation <= 60 s")
        if not 1 <= processes <= 8:
            raise ValidationError("processes", f"must be in [1, 8], got {processes}")
        report = bench.run(
            pg_url=pg_url,
            rate_per_s=rate,
            duration_s=duration_s,
            forecast_rate_per_s=forecast_rate,
            saturation_s=saturation_s,
            processes=processes,
        )
        if json_out is not None:  # before the output: a failure to print must not lose the run
            write_output(json_out, json.dumps(report, indent=2), "--json")
        typer.echo(bench.to_markdown(report))
