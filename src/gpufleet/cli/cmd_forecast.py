"""``gpufleet forecast``: quantile forecasts for a user's own history in the generic series format."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.adapters.inputs import MAX_UNIX_S
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.errors import ValidationError


def register(app: typer.Typer) -> None:
    @app.command("forecast")
    @user_errors
    def forecast(
        series: Annotated[Path, typer.Option("--series", help="CSV: timestamp, series_id, value")],
        horizon: Annotated[str, typer.Option("--horizon", help="a duration (7d, 24h) or a number of steps")],
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the quantiles as JSON")
        ] = None,
        aggregate: Annotated[str | None, typer.Option("--aggregate", help="mean-aggregate first, e.g. 1h")] = None,
    ) -> None:
        """Forecast every series in the file with the control loop's forecaster (model chosen and intervals
        calibrated on the series' own recent errors); print the 10/50/90% quantiles per step, optionally JSON."""
        from gpufleet.bench.forecast import horizon_steps, load_regular, parse_duration_s
        from gpufleet.forecast.engine import GpufleetForecaster, check_history
        from gpufleet.forecast.quantiles import DEFAULT_QUANTILES

        data = load_regular(series, parse_duration_s(aggregate, "aggregate") if aggregate else None)
        out: dict[str, object] = {}
        lines: list[str] = []  # printed after the JSON is written: a failure to print must not lose the run
        for sid, s in data.items():
            h = horizon_steps(horizon, s.step_s)
            if int(s.t_s[-1]) + h * s.step_s > MAX_UNIX_S:
                raise ValidationError("horizon", f"series {sid!r}: {h} steps of {s.step_s} s run past 9999-12-31")
            forecaster = GpufleetForecaster(quantiles=DEFAULT_QUANTILES, memo_size=0)  # one call per series
            try:
                fc = forecaster.forecast(check_history(s.values), s.step_s, h)
            except ValidationError as exc:  # the model refuses the history: say which series of which file
                field = "value" if exc.field in ("y", "history") else exc.field  # the models call the history y
                raise ValidationError(field, f"series {sid!r}: {exc.message}", str(series)) from None
            cal = forecaster.last_
            reason = cal.reason_ if cal is not None else "no_history"
            stamps = [
                datetime.fromtimestamp(int(s.t_s[-1]) + (k + 1) * s.step_s, UTC).isoformat().replace("+00:00", "Z")
                for k in range(h)
            ]
            out[sid] = {
                "method": fc.method,
                "reason": reason,
                "step_s": s.step_s,
                "timestamps": stamps,
                "mean": fc.mean.round(6).tolist(),
                "quantiles": {f"{q:g}": fc.values[i].round(6).tolist() for i, q in enumerate(fc.levels)},
            }
            lines.append(f"{sid}: {h} steps of {s.step_s}s, method {fc.method} ({reason})")
            show = range(h) if h <= 12 else [*range(3), *range(h - 3, h)]
            for k in show:
                lines.append(
                    f"  {stamps[k]}  p10={fc.at(0.1)[k]:.3f}  p50={fc.at(0.5)[k]:.3f}  p90={fc.at(0.9)[k]:.3f}"
                )
        if json_path:
            write_output(json_path, json.dumps({"series": out}, indent=2) + "\n", "--json")
        for line in lines:
            typer.echo(line)
        if json_path:
            typer.echo(f"wrote {json_path}")
