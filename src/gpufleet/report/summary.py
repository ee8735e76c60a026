"""The terminal summary of a simulation (Rich tables)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _usd(x: float) -> str:
    return f"${x:,.0f}"


def print_summary(r: dict[str, Any], console: Console) -> None:
    head = Table(title=f"gpufleet simulation: {r['scenario']} ({r['days']} days, seed {r['seed']})", show_header=False)
    head.add_column("figure")
    head.add_column("value", justify="right")
    head.add_row("total cost", _usd(r["total_cost_usd"]))
    head.add_row("GPU utilization (allocated / paid GPU-hours)", f"{r['gpu_utilization']:.1%}")
    head.add_row("idle reserved waste", _usd(r["idle_reserved_cost_usd"]))
    head.add_row("idle waste, all tiers", _usd(r["idle_cost_usd"]))
    head.add_row("p95 training queue wait", f"{r['p95_queue_wait_s'] / 60:,.1f} min")
    head.add_row("serving SLO attainment", f"{r['serving_slo_attainment']:.3%}")
    res = r["reservations"]
    head.add_row("reservations proposed / GPUs bought", f"{res['proposed']} / {res['gpus_bought']}")
    head.add_row(
        "forecast error (WAPE, hourly, one period ahead)",
        ", ".join(f"{k} {v:.1%}" for k, v in r["forecast_wape"].items() if v is not None) or "n/a",
    )
    head.add_row("jobs arrived / completed", f"{r['jobs']['arrived']:,} / {r['jobs']['completed']:,}")
    head.add_row("node launches / terminations", f"{r['node_launches']:,} / {r['node_terminations']:,}")
    head.add_row("spot preemptions / node failures", f"{r['spot_preemptions']} / {r['node_failures']}")
    moved = r.get("moved_redo_gpu_hours", 0.0)
    head.add_row(
        "work lost (interruptions + moves)",
        f"{r['lost_gpu_hours']:,.0f} GPU-h, of which {moved:,.0f} redone by {r.get('node_moves', 0)} moves onto reserved nodes",
    )
    sch = r.get("scheduler")
    if sch is not None:
        base = r.get("baseline", {}).get("scheduler_policy")
        head.add_row(
            "scheduler policy" + (" (baseline loop)" if base else ""),
            sch["policy"] + (f" ({base})" if base else ""),
        )
        head.add_row(
            "preemptions / quota reclaims",
            f"{sch['preemptions']} ({sch['preempted_lost_gpu_hours']:,.0f} GPU-h lost) / {sch['quota_reclaims']}",
        )
    head.add_row("cost conserved (allocated + idle = fleet)", "yes" if r["cost_conserved"] else "NO")
    console.print(head)

    tiers = Table(title="cost by tier")
    tiers.add_column("tier")
    tiers.add_column("cost", justify="right")
    tiers.add_column("of which idle", justify="right")
    for k, v in r["cost_by_tier_usd"].items():
        tiers.add_row(k, _usd(v), _usd(r["idle_cost_by_tier_usd"][k]))
    console.print(tiers)

    teams = Table(title="cost by team (allocated)")
    teams.add_column("team")
    teams.add_column("cost", justify="right")
    for k, v in sorted(r["cost_by_team_usd"].items(), key=lambda kv: -kv[1]):
        teams.add_row(k, _usd(v))
    teams.add_row("[dim]idle (unallocated)[/]", _usd(r["idle_cost_usd"]))
    console.print(teams)


COMPARE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("total cost", "total_cost_usd", "usd"),
    ("GPU utilization", "gpu_utilization", "pct"),
    ("idle waste", "idle_cost_usd", "usd"),
    ("idle reserved waste", "idle_reserved_cost_usd", "usd"),
    ("p95 training queue wait (s)", "p95_queue_wait_s", "num"),
    ("serving SLO attainment", "serving_slo_attainment", "pct"),
    ("node launches", "node_launches", "num"),
    ("work lost (GPU-h)", "lost_gpu_hours", "num"),
    ("  of which redone by moves", "moved_redo_gpu_hours", "num"),
    ("GPUs reserved", "gpus_bought", "num"),
)


def _fmt(v: float, kind: str) -> str:
    if kind == "usd":
        return _usd(v)
    if kind == "pct":
        return f"{v:.2%}"
    return f"{v:,.0f}"


def print_comparison(r: dict[str, Any], console: Console) -> None:
    """gpufleet's loop next to the baseline loop on the same world."""
    base = r["baseline"]
    t = Table(title=f"{r['policy']} vs baseline loop, same scenario and seed")
    t.add_column("figure")
    t.add_column(r["policy"], justify="right")
    t.add_column("baseline", justify="right")
    for label, key, kind in COMPARE_ROWS:
        mine = r["reservations"]["gpus_bought"] if key == "gpus_bought" else r[key]
        t.add_row(label, _fmt(mine, kind), _fmt(base[key], kind))
    vs = r["vs_baseline"]
    t.add_row("[bold]cost ratio[/]", f"{vs['cost_ratio']:.3f}" if vs["cost_ratio"] else "n/a", "1.000")
    console.print(t)
