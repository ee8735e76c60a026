"""``gpufleet plan``: a what-if portfolio over the commitment tiers (plan lines, coverage, quota outlook) from a
demand history, offline. A report: it makes no reservation. The orders the service places come from the control
loop's procurer (``POST /v1/plans:propose``, ``gpufleet reconcile``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError

_out = Console(width=150)


def builtin_pair_of(key: str) -> tuple[str, str]:
    """:func:`~gpufleet.procure.planning.pair_of` against the built-in regions and price catalog (what
    ``gpufleet plan`` knows without a database)."""
    from gpufleet.procure.planning import KNOWN_REGIONS, pair_of

    return pair_of(key, KNOWN_REGIONS, prices=BUILTIN_PRICE_CATALOG)


def _days(text: str) -> int:
    t = text.strip().lower()
    try:
        return int(t[:-1]) if t.endswith("d") else int(t)
    except ValueError:
        raise ValidationError("horizon", f"expected days such as 180d, got {text!r}") from None


def _iso(ts: int | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def register(app: typer.Typer) -> None:
    @app.command("plan")
    @user_errors
    def plan(
        history: Annotated[
            Path | None, typer.Option(help="Series CSV of GPU demand; series_id 'sku@region' (default synthetic)")
        ] = None,
        horizon: Annotated[str, typer.Option(help="Planning horizon, e.g. 180d")] = "180d",
        workload_class: Annotated[str, typer.Option(help="serving | training | checkpointable")] = "serving",
        on_demand_quota: Annotated[float | None, typer.Option(help="On-demand quota per pair, GPUs")] = None,
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="Write the plan as JSON here")
        ] = None,
    ) -> None:
        """What-if: a portfolio of commitments over the tiers for the horizon, its plan lines timed by lead time
        (a report; the service's orders come from the loop's procurer: POST /v1/plans:propose)."""
        from gpufleet.bench.procure import load_demand
        from gpufleet.procure.planning import plan_from_history

        days = _days(horizon)
        if history is not None:
            demand = load_demand(history, check_id=builtin_pair_of, nonnegative=True)
            start_s = int(datetime.now(UTC).timestamp()) // 86400 * 86400
        else:
            rng = np.random.default_rng(0)
            t = np.arange(28 * 24)
            demand = {
                "h100_80gb@us-east-1": 400 + 120 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 20, len(t)),
                "l40s@us-west-2": 150 + 60 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 10, len(t)),
            }
            start_s = 1_767_225_600  # 2026-01-01, fixed so the synthetic plan is reproducible
        report = plan_from_history(
            demand,
            start_s=start_s,
            horizon_days=days,
            workload_class=workload_class,
            on_demand_quota_gpus=on_demand_quota,
            prices=BUILTIN_PRICE_CATALOG,
        )
        table = Table(
            title=f"what-if portfolio plan lines ({days} d horizon, objective ${report.plan.objective_usd:,.0f}); "
            "no reservation is made"
        )
        for col in ("action", "sku", "region", "tier", "units", "start", "submit_by", "est_cost_usd", "reason"):
            table.add_column(col)
        for p in report.proposals[:40]:
            table.add_row(
                p.action,
                p.sku_id,
                ",".join(p.regions),
                p.tier,
                str(p.units),
                _iso(p.start_s),
                _iso(p.submit_by_s),
                f"{p.est_cost_usd:,.0f}",
                p.reason,
            )
        _out.print(table)
        for q in report.quotas:
            _out.print(
                f"quota {q.pool_id}: {q.reason} exhausts {_iso(q.exhausts_at_s)} request by {_iso(q.request_by_s)}"
            )
        for k, v in report.coverage.items():
            _out.print(f"coverage {k}: {v['coverage']:.1%} of demand, commitments {v['utilization']:.1%} used")
        if json_path is not None:
            doc = {
                "objective_usd": report.plan.objective_usd,
                "proposals": [asdict(p) for p in report.proposals],
                "quotas": [asdict(q) for q in report.quotas],
                "coverage": report.coverage,
                "provider_share": report.plan.provider_share,
            }
            json_path.parent.mkdir(parents=True, exist_ok=True)
            write_output(json_path, json.dumps(doc, indent=2), "--json")
