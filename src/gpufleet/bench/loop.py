"""``gpufleet bench loop``: gpufleet's control loop against the foundation's baseline loop over several seeds.

One simulated world per seed; both loops see the same scenario and seed. Because a different decision changes
which nodes exist and so which of them fail or are preempted, single-seed differences are noisy: the benchmark
reports the mean and spread of the per-seed ratios.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.compare import compare, versus
from gpufleet.sim.run import LOOPS

ROW_FIGURES = ("total_cost_usd", "gpu_utilization", "p95_queue_wait_s", "serving_slo_attainment", "node_launches")


FIGURES = ("total_cost_usd", "gpu_utilization", "p95_queue_wait_s", "serving_slo_attainment", "node_launches")


def bench_loop(seeds: list[int], days: int, gpus: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        sc = default_scenario(gpus=gpus, days=days, seed=seed)
        res = compare(sc, {"gpufleet": LOOPS["gpufleet"], "baseline": LOOPS["baseline"]}, seed=seed)
        g, b = res["gpufleet"], res["baseline"]
        rows.append(
            {
                "seed": seed,
                **versus(g, b),
                "gpufleet": {k: g[k] for k in FIGURES},
                "baseline": {k: b[k] for k in FIGURES},
            }
        )

    def stat(key: str) -> dict[str, float]:
        xs = [float(r[key]) for r in rows if r[key] is not None]
        return {
            "mean": round(statistics.fmean(xs), 4),
            "sd": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0,
            "min": round(min(xs), 4),
            "max": round(max(xs), 4),
        }

    return {
        "days": days,
        "gpus": gpus,
        "seeds": seeds,
        "cost_ratio": stat("cost_ratio"),
        "node_launches_ratio": stat("node_launches_ratio"),
        "slo_delta": stat("slo_delta"),
        "p95_queue_wait_delta_s": stat("p95_queue_wait_delta_s"),
        "rows": rows,
    }
