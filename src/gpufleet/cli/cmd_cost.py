"""``gpufleet cost chargeback``: chargeback/showback for any window from CSV tables and telemetry uploads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpufleet.adapters.cost_files import read_allocations_csv, read_capacity_csv
from gpufleet.adapters.telemetry_files import parse_time, read_file
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.chargeback import DIMENSIONS, chargeback
from gpufleet.cost.meter import UsageTotals, meter_usage
from gpufleet.cost.model import PARTS_PER_GPU, DistributionRule
from gpufleet.cost.telemetry import MAX_BUCKET_S, to_usage_columns
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import units_to_cents

cost_app = typer.Typer(help="Cost and FinOps: chargeback and showback.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cost_app, name="cost")


def _when(raw: str, name: str) -> int:
    return parse_time(raw, f"--{name}")


@cost_app.command("chargeback")
@user_errors
def chargeback_cmd(
    capacity: Annotated[Path, typer.Option(help="capacity.csv (what was paid for)")],
    allocations: Annotated[Path, typer.Option(help="allocations.csv (who held it)")],
    start: Annotated[str, typer.Option("--from", help="window start, ISO-8601 or UNIX seconds")],
    end: Annotated[str, typer.Option("--to", help="window end (exclusive)")],
    by: Annotated[str, typer.Option(help=f"group by: {', '.join(DIMENSIONS)}")] = "team",
    telemetry: Annotated[Path | None, typer.Option(help="utilization upload (.csv or .json)")] = None,
    bucket_s: Annotated[
        int, typer.Option(min=1, max=MAX_BUCKET_S, help="telemetry bucket in seconds (at most a year)")
    ] = 300,
    idle_rule: Annotated[DistributionRule, typer.Option(help="how idle capacity is charged")] = (
        DistributionRule.SEPARATE_LINE
    ),
    shared_rule: Annotated[DistributionRule, typer.Option(help="how shared allocations are charged")] = (
        DistributionRule.PROPORTIONAL
    ),
    mode: Annotated[str, typer.Option(help="chargeback or showback (a label on the report)")] = "chargeback",
    csv_path: Annotated[
        Path | None, typer.Option("--csv", callback=output_file, help="write the report as CSV")
    ] = None,
) -> None:
    """Charge a window's cost to the labels of its allocations; allocated + idle == fleet cost, exactly."""
    t0, t1 = _when(start, "from"), _when(end, "to")
    if mode not in ("chargeback", "showback"):
        raise ValidationError("mode", f"chargeback or showback, got {mode!r}")
    caps = read_capacity_csv(capacity)
    allocs, by_pod = read_allocations_csv(allocations)
    result = allocate_costs(caps, allocs, t0, t1, idle_rule=idle_rule, shared_rule=shared_rule)
    usage: UsageTotals | None = None
    note = ""
    if telemetry is not None:
        cols, unmatched = to_usage_columns(read_file(telemetry), by_pod, t0, bucket_s, allocs)
        per_sample = np.array([min(a.parts, PARTS_PER_GPU) for a in allocs], dtype=np.int64)  # samples are per device
        usage = meter_usage(cols, per_sample, t0, t1)
        note = f"; {unmatched} telemetry samples matched no allocation" if unmatched else ""
    rep = chargeback(result, allocs, by, usage, mode=mode)
    if csv_path is not None:  # before the table: a failure to print must not lose the report
        write_output(csv_path, rep.to_csv(), "--csv")
    iso0, iso1 = datetime.fromtimestamp(t0, UTC).isoformat(), datetime.fromtimestamp(t1, UTC).isoformat()
    t = Table(title=f"{mode} by {by}, {iso0} .. {iso1}")
    for col in (by, "GPU-h held", "GPU-h used", "direct $", "idle $", "shared $", "total $"):
        t.add_column(col, justify="left" if col == by else "right")
    for r in rep.rows:
        used = f"{r.used_gpu_h:,.1f}" if usage is not None else "-"
        t.add_row(escape(r.key), f"{r.allocated_gpu_h:,.1f}", used, *map(str, r.usd), str(r.total_usd))
    t.add_row("TOTAL", "", "", "", "", "", str(units_to_cents(result.fleet_units)))
    Console().print(t)
    Console(stderr=True).print(f"conserved: {result.conserved}{note}", highlight=False)
