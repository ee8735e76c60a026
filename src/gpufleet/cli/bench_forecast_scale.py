"""``gpufleet bench forecast-scale``: time forecasting many short daily series at a long horizon."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors


def register(app: typer.Typer) -> None:
    @app.command("forecast-scale")
    @user_errors
    def bench_forecast_scale(
        n_series: Annotated[int, typer.Option("--n-series", min=1)] = 1000,
        points: Annotated[int, typer.Option("--points", min=3)] = 60,
        horizon: Annotated[int, typer.Option("--horizon", min=1, max=100_000)] = 90,
        seed: Annotated[int, typer.Option("--seed", min=0)] = 7,
    ) -> None:
        """Forecast N synthetic daily series (default 1,000 x 60 points, horizon 90) and report seconds."""
        from gpufleet.bench.forecast_scale import run_forecast_scale

        r = run_forecast_scale(n_series, points, horizon, seed=seed)
        typer.echo(
            f"{r.n_series} series x {r.points} points, horizon {r.horizon}: {r.total_s:.2f} s total "
            f"({r.per_series_ms:.1f} ms/series); warm-up (first call) {r.warmup_s:.2f} s"
        )
