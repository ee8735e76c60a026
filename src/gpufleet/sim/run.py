"""Run a scenario through the closed loop and summarize what happened, as plain JSON-ready data."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gpufleet.control.loop import ControlLoop
from gpufleet.control.procurement import TierLimits
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.catalog import on_demand_usd_h
from gpufleet.domain.money import usd_float
from gpufleet.domain.pools import TIER_ORDER, Tier
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.domain.workloads import ServingScaling
from gpufleet.sim.backlog import backlog_gpu_s, backlog_price_usd_h
from gpufleet.sim.kinds import PARKED
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.serving import FleetRuntime
from gpufleet.sim.world import World

HOUR_S = 3600


def simulate(
    sc: Scenario,
    *,
    seed: int | None = None,
    days: int | None = None,
    loop: ControlLoop | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[World, dict[str, Any]]:
    if days is not None:
        sc = sc.model_copy(update={"days": days})
    seed_ = sc.seed if seed is None else seed
    world = World(sc, loop or gpufleet_loop(sc, seed_), seed=seed_)
    world.run(progress)
    return world, summarize(world)


def baseline_loop(sc: Scenario, seed: int) -> ControlLoop:
    """The foundation's simple policies: what every improvement is measured against."""
    return ControlLoop.baseline(seed, sc.control.target_utilization, sc.control.idle_node_timeout_s)


def gpufleet_loop(sc: Scenario, seed: int) -> ControlLoop:
    """The best stages gpufleet has (falls back to the baseline for stages not yet replaced)."""
    loop = ControlLoop.gpufleet(
        seed,
        sc.control.target_utilization,
        sc.control.idle_node_timeout_s,
        sc.control.control_period_s,
        scheduler_policy=sc.control.scheduler_policy,
        preemption=sc.control.preemption,
        tier_limits={
            p.sku: TierLimits(
                p.spot_capacity_gpus,
                p.secondary_capacity_gpus,
                math.inf if p.on_demand_quota_gpus is None else p.on_demand_quota_gpus,
            )
            for p in sc.pools
        },
    )
    loop.preempt_grace_s = sc.control.preempt_grace_s
    if isinstance(loop.autoscaler, SpareReplicas):  # the fleets as the world keys them: size, SLO, queue kind
        for s in sc.serving:
            loop.autoscaler.declare_fleet(
                ServingScaling(
                    s.min_replicas, s.max_replicas, s.target_rps_per_replica, s.cold_start_s, s.scale_down_delay_s
                ),
                gpus_per_replica=s.gpus_per_replica,
                slo_s=s.slo_s,
                max_concurrency=1 if s.queue == "exclusive" else None,
                price_usd_per_replica_h=on_demand_usd_h(s.sku) * s.gpus_per_replica,
                gpu_type=s.sku,
            )
    return loop


def common_practice_loop(sc: Scenario, seed: int) -> ControlLoop:
    """What teams do today (control/common_practice.py): quarterly peak reservations, static peak-sized
    replicas, best-fit placement, Cluster-Autoscaler scale-down after the idle timeout."""
    return ControlLoop.common_practice(seed, sc.control.idle_node_timeout_s, sc.control.control_period_s)


LOOPS = {"gpufleet": gpufleet_loop, "common_practice": common_practice_loop, "baseline": baseline_loop}


def _r(x: float, nd: int = 4) -> float:
    return float(round(x, nd))


def _misses_by_cause(fleets: list[FleetRuntime]) -> dict[str, float]:
    """Missed serving requests summed over the fleets, by cause (sim/serving.py, ``MISS_CAUSES``)."""
    out: dict[str, float] = {}
    for fr in fleets:
        for k, v in fr.misses_by_cause.items():
            out[k] = out.get(k, 0.0) + v
    return {k: _r(v, 1) for k, v in sorted(out.items())}


def _backlog(w: World, billed_uusd: list[int], alloc_gpu_s: list[int]) -> dict[str, dict[str, float]]:
    """Per SKU: the backlog at the horizon (GPU-hours), its price per GPU-hour and its value (sim/backlog.py), from
    the SKU's billed cost (micro-USD) and allocated GPU-seconds."""
    p, f = w.pods, w.fleet
    n = p.n_jobs
    gpu_s = backlog_gpu_s(
        work_s=p.work[:n],
        arrival_s=p.arrival[:n],
        state=p.state[:n],
        start_s=p.start[:n],
        remaining_s=p.remaining[:n],
        gpus=p.gpus[:n],
        serving=p.serving[:n],
        sku=p.sku[:n],
        horizon_s=w.horizon_s,
        n_skus=len(w.sku_ids),
    )
    out: dict[str, dict[str, float]] = {}
    for s, sku_id in enumerate(w.sku_ids):
        od = f.pool_of(s, Tier.ON_DEMAND)
        on_demand = f.pools[od].price_usd if od >= 0 else None
        price = backlog_price_usd_h(on_demand, usd_float(billed_uusd[s]), alloc_gpu_s[s] / HOUR_S)
        hours = gpu_s[s] / HOUR_S
        out[sku_id] = {"gpu_hours": _r(hours, 1), "usd_per_gpu_h": _r(price, 4), "usd": _r(hours * price, 2)}
    return out


def summarize(w: World) -> dict[str, Any]:
    f = w.fleet
    total_units = 0
    alloc_units_pools = 0
    by_tier = {t.value: 0 for t in TIER_ORDER}
    idle_by_tier = {t.value: 0 for t in TIER_ORDER}
    paid_gpu_s = 0
    alloc_gpu_s = 0
    billed_by_sku = [0] * len(w.sku_ids)
    alloc_gpu_s_by_sku = [0] * len(w.sku_ids)
    for pr in f.pools:
        cost = pr.price_uusd * pr.paid_gpu_s
        alloc = pr.price_uusd * pr.alloc_gpu_s
        billed_by_sku[pr.sku_idx] += cost
        alloc_gpu_s_by_sku[pr.sku_idx] += pr.alloc_gpu_s
        total_units += cost
        alloc_units_pools += alloc
        by_tier[pr.pool.tier.value] += cost
        idle_by_tier[pr.pool.tier.value] += cost - alloc
        paid_gpu_s += pr.paid_gpu_s
        alloc_gpu_s += pr.alloc_gpu_s
    idle_units = total_units - alloc_units_pools
    conserved = w.ledger.allocated_units == alloc_units_pools and alloc_units_pools + idle_units == total_units

    pods = w.pods
    n = pods.n_jobs
    arrival = np.asarray(pods.arrival[:n], dtype=np.int64)
    first = np.asarray(pods.first_start[:n], dtype=np.int64)
    arrived_mask = np.asarray(pods.state[:n], dtype=np.int64) != 0
    # a job still waiting at the end counts with its wait so far (censored), not as zero
    all_waits = np.where(first >= 0, first - arrival, w.horizon_s - arrival)[arrived_mask].astype(np.float64)
    arrived = int(arrived_mask.sum())
    completed = w.metrics.completed

    backlog = _backlog(w, billed_by_sku, alloc_gpu_s_by_sku)
    backlog_usd = _r(sum(b["usd"] for b in backlog.values()), 2)

    served = sum(fr.served_req for fr in w.fleets)
    total_req = sum(fr.total_req for fr in w.fleets)
    by_status: dict[str, int] = {}
    gpus_bought = 0
    for r in w.desk.reservations:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
        if (
            r.history
            and r.history[0].actor != "initial"
            and r.status in (ReservationStatus.ACTIVE, ReservationStatus.SUBMITTED, ReservationStatus.EXPIRED)
        ):
            gpus_bought += r.units

    fb = w.forecasts
    fc_err = {
        w.sku_ids[s]: (_r(fb.abs_err[s] / fb.actual[s]) if fb.actual[s] > 0 else None) for s in range(len(w.sku_ids))
    }
    team_cost = {k: usd_float(v) for k, v in sorted(w.ledger.by_team.items())}
    hours = w.sc.days * 24 + 1
    m = w.metrics
    sch, cons, nodes = w.scheduling, w.consolidation, w.node_events
    return {
        "scenario": w.sc.name,
        "policy": w.loop.name,
        "scheduler_policy": w.loop.scheduler_policy,
        "scheduler": {
            "policy": w.loop.scheduler_policy,
            "preemption": w.loop.preemption,
            "decisions": dict(sorted(sch.sched_reasons.items())),
            "preemptions": sch.preemptions,
            "preempted_lost_gpu_hours": _r(sch.preempted_lost_gpu_s / HOUR_S, 1),
            "serving_preempted_for_training": sch.serving_preempted_for_training,
            "consolidation": w.loop.consolidation,
            "drained_nodes": cons.drains,
            "drain_moves": cons.drain_moves,
            "quota_admissions": dict(sorted(sch.quota_reasons.items())),
            "quota_reclaims": sch.reclaims,
            "quota_reclaimed_gpus": sch.reclaimed_gpus,
            "parked_at_end": sum(1 for st in pods.state if st == PARKED),
        },
        "seed": w.seed,
        "days": w.sc.days,
        "total_cost_usd": usd_float(total_units),
        "cost_by_tier_usd": {k: usd_float(v) for k, v in by_tier.items()},
        "cost_by_team_usd": team_cost,
        # the training work the hindsight bound had done by the horizon that this loop had not, and the bill with it
        # priced in (sim/backlog.py): the cost of the same work as the bound's, comparable across loops
        "backlog_gpu_hours": _r(sum(b["gpu_hours"] for b in backlog.values()), 1),
        "backlog_by_sku": backlog,
        "backlog_usd": backlog_usd,
        "work_equal_cost_usd": _r(usd_float(total_units) + backlog_usd, 2),
        "idle_cost_usd": usd_float(idle_units),
        "idle_cost_by_tier_usd": {k: usd_float(v) for k, v in idle_by_tier.items()},
        "idle_reserved_cost_usd": usd_float(idle_by_tier[Tier.RESERVED.value]),
        "cost_conserved": conserved,
        "gpu_utilization": _r(alloc_gpu_s / paid_gpu_s if paid_gpu_s else 0.0),
        "paid_gpu_hours": _r(paid_gpu_s / HOUR_S, 1),
        "allocated_gpu_hours": _r(alloc_gpu_s / HOUR_S, 1),
        "p95_queue_wait_s": _r(float(np.percentile(all_waits, 95)) if len(all_waits) else 0.0, 1),
        "p50_queue_wait_s": _r(float(np.percentile(all_waits, 50)) if len(all_waits) else 0.0, 1),
        "p99_queue_wait_s": _r(float(np.percentile(all_waits, 99)) if len(all_waits) else 0.0, 1),
        "serving_slo_attainment": _r(served / total_req if total_req else 1.0, 6),
        "serving_misses_by_cause": _misses_by_cause(w.fleets),  # sim/serving.py, ServingFleets.account_misses
        "serving": {
            fr.spec.name: {
                "slo_attainment": _r(fr.served_req / fr.total_req if fr.total_req else 1.0, 6),
                "cold_starts": fr.cold_starts,
                "misses_by_cause": {k: _r(v, 1) for k, v in sorted(fr.misses_by_cause.items())},
            }
            for fr in w.fleets
        },
        "jobs": {"generated": n, "arrived": arrived, "completed": completed},
        "interruptions": sch.interruptions,
        "node_failures": nodes.node_failures,
        "spot_preemptions": nodes.spot_preemptions,
        "node_moves": cons.moves,
        "lost_gpu_hours": _r((sch.lost_gpu_s + cons.moved_redo_gpu_s) / HOUR_S, 1),
        "moved_redo_gpu_hours": _r(cons.moved_redo_gpu_s / HOUR_S, 1),
        "max_lost_work_over_checkpoint": _r(sch.max_lost_over_ckpt),
        "spot_violations": sch.spot_violations,
        "stockouts": m.stockouts,
        "placements": dict(sorted(m.placements.items())),
        "node_launches": sum(pr.launched for pr in f.pools if pr.pool.tier is not Tier.RESERVED),
        "node_terminations": sum(pr.terminated for pr in f.pools),
        "reservations": {
            "proposed": m.reservations_proposed,
            "gpus_proposed": m.reserved_gpus_proposed,
            "gpus_bought": gpus_bought,
            "needing_dual_approval": m.dual_approvals,
            "by_status": dict(sorted(by_status.items())),
        },
        "forecast_wape": fc_err,  # hourly demand, forecast one procurement period ahead
        "events": w.q.processed,
        "decisions": w.decisions.entries(),  # what the loop decided, as applied, with reason codes (sim/decisions.py)
        "series": {
            "hours": hours,
            "days": [_r(h / 24, 3) for h in range(hours)],
            "cost_usd": m.cost_usd_series(),  # fleet cost billed so far, hourly
            "sku_ids": w.sku_ids,
            "allocated_gpus": m.alloc.tolist(),
            "pending_gpus": m.pending.tolist(),
            "paid_gpus_by_tier": {k: v.tolist() for k, v in m.paid.items()},
            "serving": {
                name: {
                    # rounded: numpy's transcendental functions differ in the last bits between CPUs (AVX-512 or
                    # not), which only the world's demand series carries (docs/design.md, "Reproducibility")
                    "rps": np.round(m.rps[i], 6).tolist(),
                    "replicas": m.replicas[i].tolist(),
                    "ready": m.ready[i].tolist(),
                    "need": np.ceil(m.rps[i] / w.fleets[i].spec.target_rps_per_replica).tolist(),  # at target load
                }
                for i, name in enumerate(m.fleet_names)
            },
        },
    }
