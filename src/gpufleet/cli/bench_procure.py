"""``gpufleet bench procure``: every reservation policy and the hindsight bound on a GPU demand series."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output

_out = Console(width=130)


def register(app: typer.Typer) -> None:
    @app.command("procure")
    @user_errors
    def bench_procure(
        demand: Annotated[Path, typer.Option(help="Series CSV: timestamp,series_id,value (GPUs, or rps)")],
        series: Annotated[str | None, typer.Option(help="Only this series_id")] = None,
        term_hours: Annotated[int, typer.Option(help="Commitment term, hours")] = 168,
        lead_hours: Annotated[int, typer.Option(help="Lead time from commit to active, hours")] = 24,
        sku: Annotated[str, typer.Option(help="Catalog SKU whose prices apply")] = "h100_80gb",
        rps_per_replica: Annotated[
            float | None, typer.Option(help="Input is rps: convert with this rps per replica")
        ] = None,
        gpus_per_replica: Annotated[int, typer.Option(help="GPUs per serving replica (with --rps-per-replica)")] = 8,
        on_demand_quota: Annotated[float | None, typer.Option(help="On-demand quota, GPUs (default none)")] = None,
        checkpointable_share: Annotated[float, typer.Option(help="Share of demand allowed on spot")] = 0.0,
        spot_capacity: Annotated[float, typer.Option(help="Spot capacity, GPUs")] = 0.0,
        secondary_capacity: Annotated[float, typer.Option(help="Secondary provider capacity, GPUs")] = 0.0,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="Write results as JSON here")
        ] = None,
    ) -> None:
        """Replay hourly demand: policies see only the past; overflow goes to pay-per-use tiers."""
        from gpufleet.bench.procure import POLICY_ORDER, RpsToGpus, load_demand, run
        from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
        from gpufleet.procure.replay import ReplayConfig

        cfg = ReplayConfig.from_catalog(
            sku,
            prices=BUILTIN_PRICE_CATALOG,
            term_h=term_hours,
            lead_h=lead_hours,
            on_demand_quota_gpus=math.inf if on_demand_quota is None else on_demand_quota,
            checkpointable_share=checkpointable_share,
            spot_capacity_gpus=spot_capacity,
            secondary_capacity_gpus=secondary_capacity,
        )
        conv = RpsToGpus(rps_per_replica, gpus_per_replica) if rps_per_replica is not None else None
        data = load_demand(demand, series_id=series, convert=conv)
        doc = run(cfg, data)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(doc, indent=2), "--json")
        table = Table(title=f"bench procure: term {term_hours} h, lead {lead_hours} h, {sku}, alpha {cfg.alpha:.3f}")
        for col in ("series", "policy", "cost_usd", "ratio_to_optimal", "unmet_gpu_h", "reserved_util"):
            table.add_column(col, justify="left" if col in ("series", "policy") else "right")
        results: dict[str, dict[str, dict[str, float | None]]] = doc["series"]  # type: ignore[assignment]
        for sid, rows in results.items():
            for name in POLICY_ORDER:
                r = rows[name]
                ratio = r["ratio_to_optimal"]
                table.add_row(
                    sid,
                    name,
                    f"{r['cost_usd'] or 0.0:,.0f}",
                    "-" if ratio is None else f"{ratio:.3f}",
                    f"{r['unmet_gpu_h'] or 0.0:.1f}",
                    f"{r['reserved_utilization'] or 0.0:.3f}",
                )
        _out.print(table)

    @app.command("procure-loop")
    @user_errors
    def bench_procure_loop(
        seeds: Annotated[str, typer.Option(help="A-B or a comma list")] = "1-6",
        days: Annotated[int, typer.Option(min=1)] = 180,
        gpus: Annotated[int, typer.Option(min=8)] = 512,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="Write results as JSON here")
        ] = None,
    ) -> None:
        """Closed loop: the default scenario with the gpufleet loop holding its own procurer (``gpufleet``: the
        hedged forecast-led procurer, the object ``bench procure`` replays), the portfolio LP and the break-even
        procurer, and the baseline loop, per seed."""
        from gpufleet.bench.procure import closed_loop
        from gpufleet.bench.seeds import parse_seeds

        doc = closed_loop(parse_seeds(seeds), days, gpus)
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(doc, indent=2), "--json")
        names = [k for k in doc["ratio_to_baseline_loop"]]
        table = Table(title=f"procurers in the closed loop: default scenario, {gpus:,} GPUs, {days} days")
        table.add_column("seed", justify="right")
        table.add_column("baseline loop USD", justify="right")
        for n in names:
            table.add_column(f"{n} USD (x baseline loop), GPUs bought", justify="right")
        for row in doc["rows"]:
            table.add_row(
                str(row["seed"]),
                f"{row['baseline']['total_cost_usd']:,.0f}",
                *[
                    f"{row[n]['total_cost_usd']:,.0f} ({row[n]['ratio_to_baseline_loop']}), {row[n]['gpus_bought']}"
                    for n in names
                ],
            )
        summary = doc["ratio_to_baseline_loop"]
        table.add_row("mean (sd)", "", *[f"{summary[n]['mean']} ({summary[n]['sd']})" for n in names])
        _out.print(table)
