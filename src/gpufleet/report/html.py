"""A self-contained HTML report of a comparison: inline SVG charts and CSS, no scripts, works offline.

Input: the comparison document (``gpufleet.comparison/1``): every loop's summary on the same world, the
hindsight bound when present (labelled as a bound, not a policy) and each loop's cost ratios.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from gpufleet.report.changes import contrast, what_changed
from gpufleet.report.figures import BOUND, BOUND_NOTE, loop_names, table
from gpufleet.report.fmt import attainment, count, duration, pct, ratio, short, sku_label, tier_label, usd
from gpufleet.report.svg import (
    BOUND_COLOR,
    TIER_COLORS,
    Line,
    Segment,
    loop_color,
    stacked_bars,
    time_chart,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;color:#111827;max-width:1020px;
  padding:0 16px;line-height:1.45}
h1{font-size:24px;margin-bottom:4px} h2{font-size:19px;margin-top:34px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}
p.lead{font-size:16px} .muted{color:#6b7280}
table{border-collapse:collapse;margin:10px 0;font-size:14px} td,th{padding:5px 12px;border-bottom:1px solid #e5e7eb}
th{text-align:right;background:#f9fafb} th:first-child,td:first-child{text-align:left;white-space:pre}
td{text-align:right;font-variant-numeric:tabular-nums} td.bound,th.bound{background:#f3f4f6;font-style:italic}
.chart{display:block;margin:14px 0;background:#fff;max-width:100%;height:auto;border:1px solid #f3f4f6}
ul.changes li{margin:4px 0} code{background:#f3f4f6;padding:0 3px;border-radius:3px}
details{margin:10px 0} summary{cursor:pointer;font-weight:600}
"""


def _figures_table(doc: dict[str, Any]) -> str:
    header, body = table(doc)
    bound = bool(doc.get("hindsight_bound"))
    n = len(header)

    def cls(i: int) -> str:
        return ' class="bound"' if bound and i == n - 1 else ""

    head = "".join(f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(header))
    rows = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{escape(c)}</td>" for i, c in enumerate(line)) + "</tr>" for line in body
    )
    note = (
        f'<p class="muted">The <i>{BOUND}</i> column is {BOUND_NOTE}: '
        f"{escape(str(doc['hindsight_bound'].get('method', '')))}.</p>"
        if bound
        else '<p class="muted">No hindsight bound in this document (ratios to the bound are n/a).</p>'
    )
    return f"<table><tr>{head}</tr>{rows}</table>{note}"


def _lead(doc: dict[str, Any]) -> str:
    p = doc["primary"]
    s = doc["loops"][p]
    r = doc.get("ratios", {}).get(p, {})
    parts = [f"<b>{escape(p)}</b> cost <b>{usd(s['total_cost_usd'])}</b>"]
    if r.get("to_common_practice") is not None:
        parts.append(f"{ratio(r['to_common_practice'])} common practice")
    if r.get("to_baseline") is not None and p != "baseline":
        parts.append(f"{ratio(r['to_baseline'])} the baseline loop")
    if r.get("to_bound") is not None:
        parts.append(f"{ratio(r['to_bound'])} the hindsight bound (a lower bound, not a policy)")
    service = (
        f"p95 training queue wait {duration(s['p95_queue_wait_s'])}, serving SLO attainment "
        f"{attainment(s['serving_slo_attainment'])}, GPU utilization {pct(s['gpu_utilization'])}."
    )
    return f'<p class="lead">{", ".join(parts)}; {service}</p>'


def _cost_split(doc: dict[str, Any]) -> str:
    rows = []
    for name in loop_names(doc):
        s = doc["loops"][name]
        segs = []
        for t, v in s["cost_by_tier_usd"].items():
            idle = s["idle_cost_by_tier_usd"].get(t, 0.0)
            segs.append(Segment(f"{tier_label(t)} used", v - idle, TIER_COLORS.get(t, "#64748b")))
            segs.append(Segment(f"{tier_label(t)} idle", idle, TIER_COLORS.get(t, "#64748b"), faded=True))
        rows.append(
            (
                name,
                segs,
                f"{usd(s['total_cost_usd'])}, idle {pct(s['idle_cost_usd'] / s['total_cost_usd'] if s['total_cost_usd'] else 0, 0)}",
            )
        )
    b = doc.get("hindsight_bound")
    if b:
        segs = [
            Segment(tier_label(t), v, TIER_COLORS.get(t, "#64748b")) for t, v in b.get("cost_by_tier_usd", {}).items()
        ]
        if not segs:
            segs = [Segment(BOUND, float(b["total_cost_usd"]), BOUND_COLOR)]
        rows.append((f"{BOUND} (not a policy)", segs, usd(b["total_cost_usd"])))
    tiers = list(next(iter(doc["loops"].values()))["cost_by_tier_usd"])
    legend = [(tier_label(t), TIER_COLORS.get(t, "#64748b"), False) for t in tiers] + [
        ("light: paid but idle", "#6b7280", True)
    ]
    return stacked_bars(
        "Cost over the run, by tier: used (solid) and idle (light)", rows, x_label="USD", x_fmt=usd, legend=legend
    )


def _sum_rows(rows: list[list[float]]) -> list[float]:
    return [sum(col) for col in zip(*rows, strict=True)] if rows else []


def _paid_total(series: dict[str, Any], i: int | None) -> list[float]:
    """Paid GPUs per hour, all tiers, for SKU ``i`` (None: all SKUs)."""
    by_tier = series["paid_gpus_by_tier"].values()
    if i is None:
        return _sum_rows([_sum_rows(v) for v in by_tier])
    return _sum_rows([v[i] for v in by_tier])


def _daily(num: list[float], den: list[float], days: int) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for d in range(days):
        a = sum(num[d * 24 : (d + 1) * 24])
        b = sum(den[d * 24 : (d + 1) * 24])
        xs.append(d + 0.5)
        ys.append(a / b if b else 0.0)
    return xs, ys


def charts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(section, svg) for every chart: one idea per chart."""
    names = loop_names(doc)
    loops = doc["loops"]
    first = loops[names[0]]["series"]
    days = first.get("days") or [h / 24 for h in range(first["hours"])]
    n_days = int(doc.get("days") or round(days[-1]))
    out: list[tuple[str, str]] = []

    marks = []
    if doc.get("hindsight_bound"):
        marks.append((f"{BOUND} (total)", float(doc["hindsight_bound"]["total_cost_usd"]), BOUND_COLOR))
    out.append(
        (
            "Cost",
            time_chart(
                "Cost billed so far, per loop",
                days,
                [
                    Line(n, loops[n]["series"]["cost_usd"], loop_color(n, i))
                    for i, n in enumerate(names)
                    if "cost_usd" in loops[n]["series"]
                ],
                y_label="USD, cumulative",
                y_fmt=usd,
                end_marks=marks,
            ),
        )
    )
    out.append(("Cost", _cost_split(doc)))

    util = []
    for i, n in enumerate(names):
        s = loops[n]["series"]
        xs, ys = _daily(_sum_rows(s["allocated_gpus"]), _paid_total(s, None), n_days)
        util.append(Line(n, ys, loop_color(n, i)))
    out.append(
        (
            "Utilization",
            time_chart(
                "GPU utilization per day (allocated / paid GPU-hours, all SKUs)",
                xs,
                util,
                y_label="utilization",
                y_fmt=lambda v: pct(v, 0),
                y_max=1.0,
                x_max=float(n_days),
            ),
        )
    )
    out.append(
        (
            "Queue",
            time_chart(
                "Queue: GPUs asked for and waiting for capacity (all SKUs; highest in each interval)",
                days,
                [Line(n, _sum_rows(loops[n]["series"]["pending_gpus"]), loop_color(n, i)) for i, n in enumerate(names)],
                y_label="GPUs waiting",
                how="max",
            ),
        )
    )
    for si, sku in enumerate(first["sku_ids"]):
        for n in names:
            s = loops[n]["series"]
            stacked = [
                Line(f"paid: {tier_label(t)}", v[si], TIER_COLORS.get(t))
                for t, v in s["paid_gpus_by_tier"].items()
                if any(v[si])
            ]
            alloc = s["allocated_gpus"][si]
            demand = [a + q for a, q in zip(alloc, s["pending_gpus"][si], strict=True)]
            out.append(
                (
                    f"Capacity: {sku_label(sku)}",
                    time_chart(
                        f"{sku_label(sku)}, {n}: GPUs paid for by tier vs allocated",
                        days,
                        [
                            Line("allocated", alloc, "#111827", width=1.6),
                            Line("asked (allocated + waiting)", demand, "#dc2626", dashed=True, width=1.4),
                        ],
                        stacked=stacked,
                        y_label="GPUs",
                    ),
                )
            )
    for fname in first["serving"]:
        lines = []
        need = first["serving"][fname].get("need")
        if need is not None:
            lines.append(Line("need (traffic / target per replica)", need, BOUND_COLOR, dashed=True, width=1.6))
        for i, n in enumerate(names):
            lines.append(
                Line(f"replicas: {n}", loops[n]["series"]["serving"][fname]["replicas"], loop_color(n, i), width=1.6)
            )
        out.append(
            (
                "Serving",
                time_chart(f"Serving {fname}: replicas vs need", days, lines, y_label="replicas"),
            )
        )
    return out


def _decision_table(doc: dict[str, Any]) -> str:
    p = doc["primary"]
    ds = doc["loops"][p].get("decisions") or []
    rows = "".join(
        f"<tr><td>{d['day']:.1f}</td><td>{escape(d['stage'])}</td><td>{escape(d['action'])}</td>"
        f"<td><code>{escape(d['reason'])}</code></td><td>{escape(sku_label(d.get('sku')))}</td>"
        f"<td>{count(d.get('gpus')) if d.get('gpus') is not None else ''}</td>"
        f"<td style='text-align:left'>{escape(d['detail'])}</td></tr>"
        for d in ds
    )
    return (
        f"<details><summary>{escape(p)}'s decision log ({len(ds):,} entries; frequent decisions added up per day)"
        "</summary><table><tr><th>day</th><th>stage</th><th>action</th><th>reason</th><th>SKU</th><th>GPUs</th>"
        f"<th>detail</th></tr>{rows}</table></details>"
    )


def render_html(doc: dict[str, Any]) -> str:
    p = doc["primary"]
    changes = "".join(f"<li>{escape(x)}</li>" for x in what_changed(doc))
    others = "".join(f"<li>{escape(x)}</li>" for x in contrast(doc))
    sections: dict[str, list[str]] = {}
    for sec, svg in charts(doc):
        sections.setdefault(sec, []).append(svg)
    body = "".join(f"<h2>{escape(sec)}</h2>{''.join(svgs)}" for sec, svgs in sections.items())
    conserved = ", ".join(f"{n} {'yes' if s['cost_conserved'] else 'NO'}" for n, s in doc["loops"].items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufleet report: {escape(doc["scenario"])}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style></head><body>
<h1>gpufleet: {escape(", ".join(loop_names(doc)))} on the same world</h1>
<p class="muted">Scenario <b>{escape(doc["scenario"])}</b>, {doc["days"]} days, seed {doc["seed"]}; every loop sees the
same demand, failures and stock-outs.</p>
{_lead(doc)}
<h2>Figures</h2>
{_figures_table(doc)}
<h2>What {escape(p)} changed</h2>
<ul class="changes">{changes}</ul>
<ul class="changes muted">{others}</ul>
{_decision_table(doc)}
{body}
<p class="muted">Cost conserved (allocated + idle = fleet cost): {escape(conserved)}.
Events processed: {", ".join(f"{n} {short(s['events'])}" for n, s in doc["loops"].items())}.</p>
</body></html>
"""


def write_html_report(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(doc))
