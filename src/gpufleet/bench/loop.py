"""``gpufleet bench loop``: every control loop on the same worlds over several seeds, with the hindsight bound.

One simulated world per seed; every loop of ``sim.run.LOOPS`` (gpufleet, common_practice, baseline) sees the same
scenario and seed, and the hindsight bound (sim/bound.py: a lower bound on the cost of the realized demand, not
a policy) prices that seed's demand. Because a different decision changes which nodes exist and so which of them
fail or are preempted, single-seed differences are noisy: the benchmark reports means with their spread (sample
standard deviation, min and max over seeds) and each loop's per-seed cost ratios, and for gpufleet's cost against
each other loop a 95 % confidence interval of the mean per-seed ratio (paired by seed, Student's t over the seeds):
how far the seeds at hand pin the ratio down, next to the target's ratio of means.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from gpufleet.sim.compare import run_loops
from gpufleet.sim.scenario import Scenario

FIGURES = (
    "total_cost_usd",
    "gpu_utilization",
    "p95_queue_wait_s",
    "serving_slo_attainment",
    "node_launches",
    "idle_cost_usd",
    "lost_gpu_hours",
    "backlog_gpu_hours",
    "work_equal_cost_usd",
)
# what issue #16 asks of gpufleet against each other loop (mean cost ratio at most this; service no worse)
TARGET_COST_RATIO = {"common_practice": 0.85, "baseline": 0.93}
TARGET_RATIO_TO_BOUND = 1.20


def _stat(xs: list[float]) -> dict[str, float]:
    # six decimals: SLO attainments differ in the fifth
    return {
        "mean": round(statistics.fmean(xs), 6),
        "sd": round(statistics.stdev(xs), 6) if len(xs) > 1 else 0.0,
        "min": round(min(xs), 6),
        "max": round(max(xs), 6),
    }


def mean_ci95(xs: list[float]) -> tuple[float, float] | None:
    """The 95 % confidence interval of the mean of ``xs`` (Student's t, ``len(xs) - 1`` degrees of freedom); None
    under two values."""
    if len(xs) < 2:
        return None
    from scipy import stats  # here, not at module level: scipy.stats takes ~1 s to import

    half = float(stats.t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / math.sqrt(len(xs))
    m = statistics.fmean(xs)
    return round(m - half, 4), round(m + half, 4)


def bench_loop(
    sc: Scenario, seeds: list[int], *, progress: Callable[[int, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run every loop on ``sc`` for each seed; per-seed rows, per-loop means with spread, and the targets."""
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        doc = run_loops(sc, seed)
        row = {
            "seed": seed,
            "bound_usd": doc["hindsight_bound"]["total_cost_usd"],
            "loops": {
                n: {**{k: r[k] for k in FIGURES}, **{f"ratio_{k}": v for k, v in doc["ratios"][n].items()}}
                for n, r in doc["loops"].items()
            },
        }
        rows.append(row)
        if progress is not None:
            progress(seed, row)
    return {"scenario": sc.name, "days": sc.days, **aggregate(rows)}


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-loop means with spread over the per-seed rows, the bound's mean, and the targets."""
    names = list(rows[0]["loops"])
    loops: dict[str, dict[str, Any]] = {}
    for n in names:

        def col(key: str, n: str = n) -> list[float]:
            return [float(r["loops"][n][key]) for r in rows if r["loops"][n][key] is not None]

        cost = _stat(col("total_cost_usd"))
        entry: dict[str, Any] = {
            "cost_usd_mean": cost["mean"],
            "cost_usd": cost,
            "p95_queue_wait_s_mean": _stat(col("p95_queue_wait_s"))["mean"],
            "p95_queue_wait_s": _stat(col("p95_queue_wait_s")),
            "slo_attainment_mean": _stat(col("serving_slo_attainment"))["mean"],
            "slo_attainment": _stat(col("serving_slo_attainment")),
            "gpu_utilization_mean": _stat(col("gpu_utilization"))["mean"],
            "idle_cost_usd_mean": _stat(col("idle_cost_usd"))["mean"],
            "node_launches_mean": _stat(col("node_launches"))["mean"],
            "ratio_to_bound_mean": _stat(col("ratio_to_bound"))["mean"],
            "ratio_to_bound": _stat(col("ratio_to_bound")),
            # the same work as the bound's: the bill plus the training backlog at the horizon (sim/backlog.py)
            "backlog_gpu_hours_mean": _stat(col("backlog_gpu_hours"))["mean"],
            "work_equal_cost_usd_mean": _stat(col("work_equal_cost_usd"))["mean"],
            "work_equal_ratio_to_bound_mean": _stat(col("ratio_work_equal_to_bound"))["mean"],
        }
        for other in ("baseline", "common_practice"):
            if other in names:
                entry[f"ratio_to_{other}_mean"] = _stat(col(f"ratio_to_{other}"))["mean"]
                xs = col(f"ratio_to_{other}")
                entry[f"ratio_to_{other}"] = {**_stat(xs), "ci95": mean_ci95(xs)}
        loops[n] = entry
    return {
        "seeds": [r["seed"] for r in rows],
        "loops": loops,
        "hindsight_bound": {"cost_usd_mean": _stat([r["bound_usd"] for r in rows])["mean"]},
        "targets": targets(loops),
        "rows": rows,
    }


def targets(loops: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Issue #16's Done-when, evaluated on these means: gpufleet's cost ratio to each loop, and its service."""
    g = loops.get("gpufleet")
    out: dict[str, Any] = {}
    if g is None:
        return out
    for other, limit in TARGET_COST_RATIO.items():
        o = loops.get(other)
        if o is None:
            continue
        ratio = g["cost_usd_mean"] / o["cost_usd_mean"]
        same_work = g["work_equal_cost_usd_mean"] / o["work_equal_cost_usd_mean"]
        per_seed = g.get(f"ratio_to_{other}")
        out[other] = {
            "cost_ratio_of_means": round(ratio, 4),
            "work_equal_cost_ratio_of_means": round(same_work, 4),
            # the per-seed ratios (paired by seed): their mean and its 95 % confidence interval
            "cost_ratio_per_seed_mean": per_seed["mean"] if per_seed else None,
            "cost_ratio_per_seed_ci95": per_seed.get("ci95") if per_seed else None,
            "limit": limit,
            "cost_met": ratio <= limit,
            "work_equal_cost_met": same_work <= limit,
            "p95_wait_no_worse": g["p95_queue_wait_s_mean"] <= o["p95_queue_wait_s_mean"],
            "slo_no_worse": g["slo_attainment_mean"] >= o["slo_attainment_mean"],
        }
    out["ratio_to_bound"] = {
        "mean": g["ratio_to_bound_mean"],
        "work_equal_mean": g["work_equal_ratio_to_bound_mean"],
        "aim": TARGET_RATIO_TO_BOUND,
        "met": g["ratio_to_bound_mean"] <= TARGET_RATIO_TO_BOUND,
    }
    return out
