"""Workload generation: serving traffic with daily/weekly cycles and growth, lumpy training demand.

Everything is drawn from the generator passed in, vectorized with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.sim.scenario import ExperimentSpec, PlannedRun, ServingSpec

DAY_S = 86400
WEEK_S = 7 * DAY_S
QUARTER_S = 91 * DAY_S

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class JobBatch:
    """Training jobs sorted by arrival. ``ckpt_s`` is 0 for jobs that do not checkpoint; ``sku`` is each job's
    SKU (a team may run experiment streams on several SKUs)."""

    arrival_s: I64
    gpus: I64
    work_s: I64
    ckpt_s: I64
    team: list[str]
    group: list[str]
    priority: I64
    sku: list[str]


def serving_rps(spec: ServingSpec, t_s: F64 | I64, rng: np.random.Generator) -> F64:
    """Request rate at times ``t_s``: growth x daily cycle x weekly cycle x day level x lognormal noise.

    The daily peak is mid-afternoon; weekends are lower by ``weekly_amplitude``.
    """
    t = np.asarray(t_s, dtype=np.float64)
    growth = spec.growth_per_quarter ** (t / QUARTER_S)
    daily = 1.0 + spec.daily_amplitude * np.sin(2 * np.pi * (t / DAY_S - 0.375))
    dow = np.floor(t / DAY_S) % 7
    weekly = np.where(dow >= 5, 1.0 - spec.weekly_amplitude, 1.0 + spec.weekly_amplitude * 2 / 5)
    noise = np.exp(rng.normal(0.0, spec.noise_sd, size=t.shape) - spec.noise_sd**2 / 2)
    day_idx = np.floor(t / DAY_S).astype(np.int64)
    n_days = int(day_idx.max()) + 1 if len(day_idx) else 0
    sd = spec.day_to_day_sd
    day_factor = np.exp(rng.normal(0.0, sd, size=n_days) - sd**2 / 2)
    return spec.base_rps * growth * daily * weekly * noise * day_factor[day_idx]


def experiments(spec: ExperimentSpec, days: int, rng: np.random.Generator) -> JobBatch:
    """Poisson arrivals with a working-hours cycle; sizes from ``size_gpus``; lognormal durations (capped)."""
    hours = days * 24
    h = np.arange(hours, dtype=np.float64)
    rate_h = spec.jobs_per_day / 24 * (1.0 + spec.daily_amplitude * np.sin(2 * np.pi * (h / 24 - 0.375)))
    counts = rng.poisson(np.maximum(rate_h, 0.0))
    n = int(counts.sum())
    arrival = (np.repeat(h, counts) * 3600 + rng.integers(0, 3600, size=n)).astype(np.int64)
    arrival.sort()
    sizes = np.array(sorted(spec.size_gpus), dtype=np.int64)
    p = np.array([spec.size_gpus[int(s)] for s in sizes], dtype=np.float64)
    gpus = rng.choice(sizes, size=n, p=p / p.sum())
    dur_h = np.minimum(rng.lognormal(np.log(spec.duration_median_h), spec.duration_sigma, size=n), spec.duration_max_h)
    work = np.maximum(60, (dur_h * 3600).astype(np.int64))
    ckpt = np.where(rng.random(n) < spec.checkpointable_share, spec.checkpoint_interval_s, 0).astype(np.int64)
    teams = sorted(spec.teams)
    tp = np.array([spec.teams[t] for t in teams])
    team_idx = rng.choice(len(teams), size=n, p=tp / tp.sum())
    # each job's team and group name, read off a table per team (the same strings as one f-string per job)
    team = _objects(teams)[team_idx].tolist()
    group = _objects([f"experiments/{t}" for t in teams])[team_idx].tolist()
    # bigger experiments are more often normal priority, 1-GPU tinkering is low priority
    prio = np.where(gpus >= 8, 1, 0).astype(np.int64)
    return JobBatch(arrival, gpus, work, ckpt, team, group, prio, [spec.sku] * n)


def planned(runs: list[PlannedRun], rng: np.random.Generator) -> JobBatch:
    """Large planned runs: each happens with its probability (a big run either happens or not)."""
    keep = [r for r in runs if rng.random() < r.probability]
    return JobBatch(
        np.array([int(r.start_day * DAY_S) for r in keep], dtype=np.int64),
        np.array([r.gpus for r in keep], dtype=np.int64),
        np.array([int(r.duration_days * DAY_S) for r in keep], dtype=np.int64),
        np.array([r.checkpoint_interval_s for r in keep], dtype=np.int64),
        [r.team for r in keep],
        [f"planned/{r.name}" for r in keep],
        np.full(len(keep), 2, dtype=np.int64),
        [r.sku for r in keep],
    )


def merge(batches: list[JobBatch]) -> JobBatch:
    arrival = np.concatenate([b.arrival_s for b in batches]) if batches else np.zeros(0, np.int64)
    order = np.argsort(arrival, kind="stable")

    def cat(xs: list[I64]) -> I64:
        return np.concatenate(xs)[order] if xs else np.zeros(0, np.int64)

    def names(xs: list[list[str]]) -> list[str]:  # the batches' names in arrival order ([all[i] for i in order])
        out: list[str] = _objects([x for b in xs for x in b])[order].tolist()
        return out

    return JobBatch(
        arrival[order],
        cat([b.gpus for b in batches]),
        cat([b.work_s for b in batches]),
        cat([b.ckpt_s for b in batches]),
        names([b.team for b in batches]),
        names([b.group for b in batches]),
        cat([b.priority for b in batches]),
        names([b.sku for b in batches]),
    )


def _objects(xs: list[str]) -> npt.NDArray[np.object_]:
    """``xs`` as a 1-D array of the very objects (fancy indexing then gathers them without a Python loop)."""
    out = np.empty(len(xs), dtype=object)
    out[:] = xs
    return out
