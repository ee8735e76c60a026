"""A self-contained HTML report of a simulation: inline SVG charts and CSS, no scripts, works offline."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from gpufleet.report.svg import area_line_chart, bar_chart

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#111827;max-width:1100px}
h1{font-size:22px} h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0} td,th{padding:4px 10px;border-bottom:1px solid #e5e7eb;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums} .chart{display:block;margin:10px 0;background:#fff}
.kpis{display:flex;flex-wrap:wrap;gap:12px} .kpi{border:1px solid #e5e7eb;border-radius:8px;padding:10px 14px}
.kpi b{display:block;font-size:20px}
"""


def _kpi(label: str, value: str) -> str:
    return f'<div class="kpi">{escape(label)}<b>{escape(value)}</b></div>'


def render_html(r: dict[str, Any]) -> str:
    s = r["series"]
    charts: list[str] = []
    for i, sku in enumerate(s["sku_ids"]):
        stacked = {tier: vals[i] for tier, vals in s["paid_gpus_by_tier"].items() if any(vals[i])}
        demand = [a + p for a, p in zip(s["allocated_gpus"][i], s["pending_gpus"][i], strict=True)]
        charts.append(
            area_line_chart(
                f"{sku}: demand vs supply by tier (GPUs)",
                stacked,
                {"demand (alloc+pending)": demand, "allocated": s["allocated_gpus"][i]},
            )
        )
        paid = [sum(v[i][h] for v in s["paid_gpus_by_tier"].values()) for h in range(s["hours"])]
        util = [a / p if p else 0.0 for a, p in zip(s["allocated_gpus"][i], paid, strict=True)]
        charts.append(area_line_chart(f"{sku}: GPU utilization (allocated / paid)", {}, {"utilization": util}))
    for name, fs in s["serving"].items():
        charts.append(
            area_line_chart(
                f"serving {name}: traffic and replicas",
                {},
                {"rps": fs["rps"], "replicas x10": [x * 10 for x in fs["replicas"]]},
            )
        )
    team = dict(r["cost_by_team_usd"])
    team["idle"] = r["idle_cost_usd"]
    charts.append(bar_chart("cost by team (USD), idle as its own line", team))
    charts.append(bar_chart("cost by tier (USD)", r["cost_by_tier_usd"]))
    kpis = "".join(
        [
            _kpi("total cost", f"${r['total_cost_usd']:,.0f}"),
            _kpi("GPU utilization", f"{r['gpu_utilization']:.1%}"),
            _kpi("idle reserved waste", f"${r['idle_reserved_cost_usd']:,.0f}"),
            _kpi("p95 queue wait", f"{r['p95_queue_wait_s'] / 60:,.1f} min"),
            _kpi("serving SLO", f"{r['serving_slo_attainment']:.2%}"),
            _kpi("GPUs reserved", f"{r['reservations']['gpus_bought']:,}"),
        ]
    )
    rows = "".join(
        f"<tr><td>{escape(k)}</td><td class=num>${v:,.2f}</td><td class=num>${r['idle_cost_by_tier_usd'][k]:,.2f}</td></tr>"
        for k, v in r["cost_by_tier_usd"].items()
    )
    compare = ""
    if "baseline" in r:
        b = r["baseline"]
        crow = "".join(
            f"<tr><td>{escape(label)}</td><td class=num>{r[key] if key != 'gpus_bought' else r['reservations']['gpus_bought']:,.4g}</td>"
            f"<td class=num>{b[key]:,.4g}</td></tr>"
            for label, key in (
                ("total cost (USD)", "total_cost_usd"),
                ("GPU utilization", "gpu_utilization"),
                ("idle cost (USD)", "idle_cost_usd"),
                ("idle reserved cost (USD)", "idle_reserved_cost_usd"),
                ("p95 queue wait (s)", "p95_queue_wait_s"),
                ("serving SLO attainment", "serving_slo_attainment"),
                ("node launches", "node_launches"),
                ("GPUs reserved", "gpus_bought"),
            )
        )
        compare = (
            f"<h2>{escape(r['policy'])} vs the baseline loop (same world, same seed)</h2>"
            f"<table><tr><th>figure</th><th>{escape(r['policy'])}</th><th>baseline</th></tr>{crow}</table>"
            f"<p>Cost ratio: {r['vs_baseline']['cost_ratio']}</p>"
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufleet report: {escape(r["scenario"])}</title>
<style>{CSS}</style></head><body>
<h1>gpufleet simulation: {escape(r["scenario"])} &middot; {r["days"]} days &middot; seed {r["seed"]}</h1>
<div class="kpis">{kpis}</div>
{_scheduler_line(r)}
{compare}
<h2>Cost by tier</h2><table><tr><th>tier</th><th>cost</th><th>of which idle</th></tr>{rows}</table>
<h2>Charts</h2>
{"".join(charts)}
<p>Cost conserved (allocated + idle = fleet cost): {"yes" if r["cost_conserved"] else "NO"}.
Events processed: {r["events"]:,}. Jobs arrived: {r["jobs"]["arrived"]:,}.</p>
</body></html>
"""


def write_html_report(r: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(r))


def _scheduler_line(r: dict[str, Any]) -> str:
    """Which scheduler policy placed the pods (and the baseline loop's), with preemptions and quota reclaims."""
    sch = r.get("scheduler")
    if sch is None:
        return ""
    base = r.get("baseline", {}).get("scheduler_policy")
    vs = f" (baseline loop: <b>{escape(base)}</b>)" if base else ""
    return (
        f"<p>Scheduler policy: <b>{escape(sch['policy'])}</b>{vs}; preemptions {sch['preemptions']:,} "
        f"({sch['preempted_lost_gpu_hours']:,.1f} GPU-h lost); quota reclaims {sch['quota_reclaims']:,}.</p>"
    )
