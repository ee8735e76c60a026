"""``gpufleet bench cluster-autoscale``: gpufleet's node scaler vs a Cluster-Autoscaler-like baseline.

Both runs use the foundation's loop on the steady scenario (the default until issue 16) and differ only in the
node scaler (how many nodes to launch for pending work, which idle launched nodes to terminate). The baseline launches every node a pending pod
asks for and terminates a launched node after 10 minutes unneeded (Kubernetes Cluster Autoscaler's default; the
simulator only offers fully idle nodes, so its 50% utilization threshold does not bind). gpufleet's
(:class:`~gpufleet.autoscale.nodes_payoff.PayoffAwareNodes`) launches only a gang's shortfall, waits instead of
launching for nodes whose running work reports it ends before a new node would be ready (``sim/freeing.py``),
keeps an idle node until the rent-or-buy break-even (the relaunch's wait priced at on-demand), and moves long
gangs from launched nodes onto reserved nodes that stand idle (``sim/moves.py``). Failures, preemptions and the
error of the reported job ends are common random numbers (``sim/crn.py``).
"""

from __future__ import annotations

import statistics
from typing import Any

from gpufleet.autoscale.nodes_payoff import PayoffAwareNodes
from gpufleet.control.loop import ControlLoop
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.compare import compare
from gpufleet.sim.run import baseline_loop
from gpufleet.sim.scenario import Scenario

FIGURES = (
    "node_launches",
    "node_terminations",
    "node_moves",
    "total_cost_usd",
    "p95_queue_wait_s",
    "p50_queue_wait_s",
    "p99_queue_wait_s",
    "allocated_gpu_hours",
)


def _gpufleet_nodes(sc: Scenario, seed: int) -> ControlLoop:
    loop = baseline_loop(sc, seed)
    loop.name = "gpufleet_nodes"
    loop.node_scaler = PayoffAwareNodes.default(sc.control.idle_node_timeout_s)
    return loop


def bench_cluster_autoscale(seeds: list[int], days: int, gpus: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        sc = steady_scenario(gpus=gpus, days=days, seed=seed)
        res = compare(sc, {"gpufleet": _gpufleet_nodes, "ca_like": baseline_loop}, seed=seed)
        rows.append({"seed": seed, **{name: {k: r[k] for k in FIGURES} for name, r in res.items()}})

    def mean_ratio(key: str, per: str | None = None) -> float:
        """Mean over seeds of gpufleet's ``key`` (per unit of ``per``) over the baseline's; zeros are skipped."""
        xs = []
        for r in rows:
            g, b = r["gpufleet"], r["ca_like"]
            if per is not None and not (g[per] and b[per]):
                continue
            gv, bv = (g[key] / g[per], b[key] / b[per]) if per is not None else (g[key], b[key])
            if bv:
                xs.append(gv / bv)
        return round(statistics.fmean(xs), 4) if xs else float("nan")

    return {
        "days": days,
        "gpus": gpus,
        "seeds": seeds,
        "launches_ratio_mean": mean_ratio("node_launches"),
        "cost_ratio_mean": mean_ratio("total_cost_usd"),
        # the two scalers can get different amounts of work done in the same days (a gang started earlier or
        # later): cost per allocated GPU-hour separates "cheaper" from "did less"
        "cost_per_gpu_hour_ratio_mean": mean_ratio("total_cost_usd", per="allocated_gpu_hours"),
        "rows": rows,
    }
