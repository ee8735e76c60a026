"""``gpufleet bench loop --seeds 1-10 --scenario default --json F``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpufleet.bench.loop import bench_loop
from gpufleet.bench.seeds import parse_seeds
from gpufleet.cli.cmd_simulate import write_json
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file
from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.builtin import BUILTIN_SCENARIOS
from gpufleet.sim.scenario import parse_scenario


def _usd(x: float) -> str:
    return f"${x / 1e6:.2f}M" if abs(x) >= 1e6 else f"${x / 1e3:.0f}k"


def register(app: typer.Typer) -> None:
    @app.command("loop")
    @user_errors
    def loop(
        seeds: Annotated[str, typer.Option(help="A-B or a comma list")] = "1-10",
        scenario: Annotated[
            str, typer.Option(help=f"a built-in scenario ({', '.join(BUILTIN_SCENARIOS)}) or a scenario YAML file")
        ] = "default",
        days: Annotated[int | None, typer.Option(help="override the scenario's days")] = None,
        json_path: Annotated[Path | None, typer.Option("--json", callback=output_file)] = None,
    ) -> None:
        """Every control loop (gpufleet, common_practice, baseline) and the hindsight bound, per seed and on
        average: cost, p95 training queue wait, serving SLO attainment, ratio to the bound."""
        seed_list = parse_seeds(seeds)
        sc = resolve_scenario(scenario)
        if days is not None:
            if days < 1:
                raise ValidationError("--days", f"must be >= 1, got {days}")
            sc = parse_scenario({**sc.model_dump(), "days": days}, source="--days")
        console = Console(width=max(Console().width, 150))  # nine columns: unreadable at a pipe's 80

        def row_done(seed: int, row: dict[str, Any]) -> None:
            parts = [f"seed {seed}: bound {_usd(row['bound_usd'])}"]
            for n, r in row["loops"].items():
                parts.append(
                    f"{n} {_usd(r['total_cost_usd'])} (same work {_usd(r['work_equal_cost_usd'])}; "
                    f"{r['ratio_to_bound']}x bound, "
                    f"p95 wait {r['p95_queue_wait_s']:.0f} s, SLO {r['serving_slo_attainment']:.4f})"
                )
            console.print("; ".join(parts))

        r = bench_loop(sc, seed_list, progress=row_done)
        if json_path is not None:  # before the tables: a failure to print must not lose the run
            write_json(json_path, r)
        t = Table(title=escape(f"control loops on the {sc.name} scenario, {sc.days} days, seeds {seeds}"))
        columns = ("loop", "cost (mean ± sd)", "backlog GPU-h", "same-work cost", "x bound", "x baseline")
        for c in (*columns, "x common practice", "p95 wait (s)", "SLO"):
            t.add_column(c, justify="right")
        for n, e in r["loops"].items():
            t.add_row(
                n,
                f"{_usd(e['cost_usd']['mean'])} ± {_usd(e['cost_usd']['sd'])}",
                f"{e['backlog_gpu_hours_mean']:,.0f}",
                _usd(e["work_equal_cost_usd_mean"]),
                f"{e['ratio_to_bound_mean']:.3f} ± {e['ratio_to_bound']['sd']:.3f}",
                f"{e.get('ratio_to_baseline_mean', float('nan')):.3f}",
                f"{e.get('ratio_to_common_practice_mean', float('nan')):.3f}",
                f"{e['p95_queue_wait_s_mean']:.0f}",
                f"{e['slo_attainment_mean']:.5f}",
            )
        bound = _usd(r["hindsight_bound"]["cost_usd_mean"])
        t.add_row("hindsight bound (not a policy)", bound, "0", bound, "1", "", "", "", "")
        console.print(t)
        for other, tg in r["targets"].items():
            if other == "ratio_to_bound":
                console.print(
                    f"gpufleet / hindsight bound: {tg['mean']:.3f} billed, {tg['work_equal_mean']:.3f} for the same "
                    f"work (aim <= {tg['aim']})"
                )
            else:
                service = tg["p95_wait_no_worse"] and tg["slo_no_worse"]
                ci = tg["cost_ratio_per_seed_ci95"]
                spread = (
                    f" (per-seed ratios: mean {tg['cost_ratio_per_seed_mean']:.3f}, 95% CI {ci[0]:.3f}-{ci[1]:.3f})"
                    if ci
                    else ""
                )
                console.print(
                    f"gpufleet vs {other}: mean cost ratio {tg['cost_ratio_of_means']:.3f} billed{spread}, "
                    f"{tg['work_equal_cost_ratio_of_means']:.3f} for the same work (target <= {tg['limit']}), "
                    f"p95 wait no worse: {tg['p95_wait_no_worse']}, SLO no worse: {tg['slo_no_worse']} -> billed "
                    f"{'met' if service and tg['cost_met'] else 'NOT met'}, same work "
                    f"{'met' if service and tg['work_equal_cost_met'] else 'NOT met'}"
                )
