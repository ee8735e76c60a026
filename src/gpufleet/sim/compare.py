"""Run one scenario under several control loops with the same seed, and compare the figures that matter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.control.loop import ControlLoop
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.bound import hindsight_bound
from gpufleet.sim.run import LOOPS, simulate
from gpufleet.sim.scenario import Scenario

SCHEMA = "gpufleet.comparison/1"
PRIMARY = "gpufleet"

KEY_FIGURES: tuple[str, ...] = (
    "total_cost_usd",
    "gpu_utilization",
    "idle_cost_usd",
    "idle_reserved_cost_usd",
    "p95_queue_wait_s",
    "serving_slo_attainment",
    "node_launches",
    "lost_gpu_hours",
    "moved_redo_gpu_hours",
    "backlog_gpu_hours",
    "work_equal_cost_usd",
    "scheduler_policy",
)


def key_figures(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: r[k] for k in KEY_FIGURES}
    out["cost_by_tier_usd"] = r["cost_by_tier_usd"]
    out["gpus_bought"] = r["reservations"]["gpus_bought"]
    return out


def compare(
    sc: Scenario,
    loops: dict[str, Callable[[Scenario, int], ControlLoop]],
    *,
    seed: int | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Full results per loop name; every loop sees the same world (same seed, same demand draws)."""
    seed_ = sc.seed if seed is None else seed
    out: dict[str, dict[str, Any]] = {}
    for name, make in loops.items():
        cb = (lambda x, n=name: progress(n, x)) if progress is not None else None
        _, out[name] = simulate(sc, seed=seed_, loop=make(sc, seed_), progress=cb)
    return out


def versus(main: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Key figures of ``main`` relative to ``base``: ratios for cost-like figures, differences for rates."""

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 4) if b else None

    return {
        "cost_ratio": ratio(main["total_cost_usd"], base["total_cost_usd"]),
        "cost_saving_usd": round(base["total_cost_usd"] - main["total_cost_usd"], 2),
        "utilization_delta": round(main["gpu_utilization"] - base["gpu_utilization"], 4),
        "slo_delta": round(main["serving_slo_attainment"] - base["serving_slo_attainment"], 6),
        "p95_queue_wait_delta_s": round(main["p95_queue_wait_s"] - base["p95_queue_wait_s"], 1),
        "node_launches_ratio": ratio(main["node_launches"], base["node_launches"]),
    }


def run_loops(
    sc: Scenario,
    seed: int | None = None,
    names: list[str] | None = None,
    *,
    bound: bool = True,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """Every loop of ``LOOPS`` (or ``names``) on the same world, the hindsight bound of its realized demand, and
    each loop's cost ratios: the comparison document (schema ``gpufleet.comparison/1``, docs/scenario.md)."""
    seed_ = sc.seed if seed is None else seed
    chosen = list(LOOPS) if names is None else names
    for n in chosen:
        if n not in LOOPS:
            raise ValidationError("loop", f"unknown loop {n!r}; choose from {list(LOOPS)}")
    loops: dict[str, dict[str, Any]] = {}
    world = None
    for name in chosen:
        cb = (lambda x, n=name: progress(n, x)) if progress is not None else None
        world, loops[name] = simulate(sc, seed=seed_, loop=LOOPS[name](sc, seed_), progress=cb)
    bound_doc = hindsight_bound(world) if bound and world is not None else None
    return comparison_document(sc, seed_, loops, bound_doc)


def comparison_document(
    sc: Scenario, seed: int, loops: dict[str, dict[str, Any]], bound: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The comparison document from each loop's summary (same world, same seed) and the bound, if any."""

    def ratio(a: float, b: float | None) -> float | None:
        return round(a / b, 4) if b else None

    bound_usd = float(bound["total_cost_usd"]) if bound is not None else None
    base = loops.get("baseline", {}).get("total_cost_usd")
    common = loops.get("common_practice", {}).get("total_cost_usd")
    # the same work: each bill with the training backlog at the horizon priced in (sim/backlog.py)
    base_we = loops.get("baseline", {}).get("work_equal_cost_usd")
    common_we = loops.get("common_practice", {}).get("work_equal_cost_usd")
    doc: dict[str, Any] = {"schema": SCHEMA, "scenario": sc.name, "seed": seed, "days": sc.days}
    doc["primary"] = PRIMARY if PRIMARY in loops else next(iter(loops))
    doc["loops"] = loops
    if bound is not None:
        doc["hindsight_bound"] = bound
    doc["ratios"] = {
        n: {
            "to_bound": ratio(r["total_cost_usd"], bound_usd),
            "to_baseline": ratio(r["total_cost_usd"], base),
            "to_common_practice": ratio(r["total_cost_usd"], common),
            "work_equal_to_bound": ratio(r["work_equal_cost_usd"], bound_usd),
            "work_equal_to_baseline": ratio(r["work_equal_cost_usd"], base_we),
            "work_equal_to_common_practice": ratio(r["work_equal_cost_usd"], common_we),
        }
        for n, r in loops.items()
    }
    return doc
