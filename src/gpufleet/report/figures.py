"""The comparison table both faces print: one column per loop, then the hindsight bound where it applies.

Reads the comparison document (schema ``gpufleet.comparison/1``: see cli/cmd_simulate.py and sim/compare.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.report.fmt import NA, attainment, count, duration, gpu_hours, pct, ratio, tier_label, usd

BOUND = "hindsight bound"
BOUND_NOTE = "a lower bound on the cost of the realized demand, not a policy"


def loop_names(doc: dict[str, Any]) -> list[str]:
    """The primary loop first, then the others in the document's order."""
    names = list(doc["loops"])
    p = doc.get("primary")
    return ([p] if p in names else []) + [n for n in names if n != p]


def lost_work_usd(s: dict[str, Any]) -> float | None:
    """Lost GPU-hours priced at the loop's mean cost per allocated GPU-hour (an estimate from its own figures)."""
    alloc_h = s.get("allocated_gpu_hours") or 0.0
    if alloc_h <= 0:
        return None
    return float(s["lost_gpu_hours"]) * (float(s["total_cost_usd"]) - float(s["idle_cost_usd"])) / alloc_h


def _lost(s: dict[str, Any]) -> str:
    est = lost_work_usd(s)
    return gpu_hours(s["lost_gpu_hours"]) + (f" (~{usd(est)})" if est is not None else "")


def _share(part: float, whole: float) -> str:
    if not whole:
        return ""
    f = part / whole
    return " (<1%)" if 0 < f < 0.005 else f" ({pct(f, 0)})"


def _tier_cell(t: str) -> Callable[[str, dict[str, Any]], str]:
    def cell(_name: str, s: dict[str, Any]) -> str:
        return usd(s["cost_by_tier_usd"][t]) + _share(s["cost_by_tier_usd"][t], s["total_cost_usd"])

    return cell


def _tier_bound(t: str) -> Callable[[dict[str, Any]], str]:
    def cell(b: dict[str, Any]) -> str:
        return usd(b.get("cost_by_tier_usd", {}).get(t))

    return cell


Row = tuple[str, Callable[[str, dict[str, Any]], str], Callable[[dict[str, Any]], str] | None]


def rows(doc: dict[str, Any]) -> list[Row]:
    """(label, loop cell, bound cell or None) for every figure the report compares."""
    ratios = doc.get("ratios", {})

    def r(key: str) -> Callable[[str, dict[str, Any]], str]:
        return lambda name, _s: ratio(ratios.get(name, {}).get(key))

    out: list[Row] = [
        ("total cost", lambda _n, s: usd(s["total_cost_usd"]), lambda b: usd(b.get("total_cost_usd"))),
    ]
    if doc.get("hindsight_bound"):
        out.append(("cost / hindsight bound", r("to_bound"), lambda _b: "1.000x"))
    if any(v.get("to_common_practice") is not None for v in ratios.values()):
        out.append(("cost / common practice", r("to_common_practice"), None))
    if "baseline" in doc["loops"]:
        out.append(("cost / baseline", r("to_baseline"), None))
    if any(v.get("work_equal_to_common_practice") is not None for v in ratios.values()):
        out.append(("same-work cost / common practice", r("work_equal_to_common_practice"), None))
    tiers = list(next(iter(doc["loops"].values()))["cost_by_tier_usd"])
    for t in tiers:
        out.append((f"  {tier_label(t)}", _tier_cell(t), _tier_bound(t)))
    out += [
        (
            "  of which idle (paid, unused)",
            lambda _n, s: usd(s["idle_cost_usd"]) + _share(s["idle_cost_usd"], s["total_cost_usd"]),
            None,
        ),
        ("lost work (redone)", lambda _n, s: _lost(s), None),
        (
            "training backlog at the end",
            lambda _n, s: f"{count(s['backlog_gpu_hours'])} GPU-h, {usd(s['backlog_usd'])}",
            None,
        ),
        ("cost of the same work", lambda _n, s: usd(s["work_equal_cost_usd"]), None),
        ("GPU utilization", lambda _n, s: pct(s["gpu_utilization"]), None),
        ("p95 training queue wait", lambda _n, s: duration(s["p95_queue_wait_s"]), None),
        ("serving SLO attainment", lambda _n, s: attainment(s["serving_slo_attainment"]), None),
        ("node launches", lambda _n, s: count(s["node_launches"]), None),
        ("GPUs reserved during the run", lambda _n, s: count(s["reservations"]["gpus_bought"]), None),
        ("scheduler policy", lambda _n, s: str(s.get("scheduler_policy", NA)), None),
    ]
    return out


def table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and body as text cells (the bound column shows "-" where a figure does not apply to it)."""
    names = loop_names(doc)
    bound = doc.get("hindsight_bound")
    header = ["figure", *names, *([BOUND] if bound else [])]
    body = []
    for label, cell, bcell in rows(doc):
        line = [label, *[cell(n, doc["loops"][n]) for n in names]]
        if bound:
            line.append(bcell(bound) if bcell is not None else "-")
        body.append([c if c else NA for c in line])
    return header, body
