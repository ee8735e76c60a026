"""``gpufleet bench forecast``: rolling-origin backtest of gpufleet vs baselines on a series CSV."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output


def register(app: typer.Typer) -> None:
    @app.command("forecast")
    @user_errors
    def bench_forecast(
        series: Annotated[Path, typer.Option("--series", help="CSV in the generic series format")],
        horizon: Annotated[str, typer.Option("--horizon", help="steps (144) or a duration (1d, 24h)")],
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write per-series, per-model metrics")
        ] = None,
        aggregate: Annotated[
            str | None, typer.Option("--aggregate", help="mean-aggregate to this step first, e.g. 1h")
        ] = None,
        origins: Annotated[int, typer.Option("--origins", help="rolling origins (>= 4)")] = 4,
        models: Annotated[str | None, typer.Option("--models", help="comma-separated subset")] = None,
        markdown: Annotated[
            Path | None, typer.Option("--markdown", callback=output_file, help="also write the tables here")
        ] = None,
        time_column: Annotated[
            str | None, typer.Option("--time-column", help="read --series as a request log: count rows per step")
        ] = None,
        group_column: Annotated[
            str | None, typer.Option("--group-column", help="with --time-column: also one series per top group")
        ] = None,
        per_origin: Annotated[
            bool, typer.Option("--per-origin", help="also print (and write to --json) each window's scores")
        ] = False,
    ) -> None:
        """Backtest gpufleet, naive, seasonal_naive, autoets, mstl (and prophet if installed); print tables."""
        from gpufleet.bench.forecast import (
            MODELS,
            load_regular,
            markdown_table,
            parse_duration_s,
            per_origin_table,
            request_rate_series,
            run_forecast_bench,
        )
        from gpufleet.domain.errors import ValidationError

        if json_path and markdown and json_path.resolve() == markdown.resolve():  # one would overwrite the other
            raise ValidationError("--markdown", f"{markdown} is also the --json file; give two files")
        if group_column and not time_column:  # not ignored: it only means something for a request log
            raise ValidationError("--group-column", "needs --time-column (it splits a request log by a column)")
        agg_s = parse_duration_s(aggregate, "aggregate") if aggregate else None
        if time_column:
            data = request_rate_series(series, time_column, agg_s or 3600, group_column)
        else:
            data = load_regular(series, agg_s)
        chosen = tuple(m.strip() for m in models.split(",") if m.strip()) if models is not None else MODELS
        result = run_forecast_bench(data, horizon, n_origins=origins, models=chosen, progress=typer.echo)
        table = markdown_table(result)
        if per_origin:
            table += "\n\n" + per_origin_table(result)
        if json_path:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(result.to_json(per_origin), indent=2) + "\n", "--json")
        if markdown:
            write_output(markdown, table + "\n", "--markdown")
        typer.echo(table)
        if json_path:
            typer.echo(f"wrote {json_path}")
