"""Job generation (sim/demand.py): the teams, groups and SKUs of the jobs, gathered by array indexing for speed,
are the lists the plain per-job loops built (bench sim's start-up draws ~1.25 M jobs)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.sim import demand
from gpufleet.sim.scenario import ExperimentSpec, PlannedRun


def plain_merge(batches: list[demand.JobBatch]) -> tuple[list[str], list[str], list[str]]:
    """merge's names as first written: one list per field, then ``[xs[i] for i in order]``."""
    arrival = np.concatenate([b.arrival_s for b in batches])
    idx = np.argsort(arrival, kind="stable").tolist()
    team = [t for b in batches for t in b.team]
    group = [g for b in batches for g in b.group]
    sku = [k for b in batches for k in b.sku]
    return [team[i] for i in idx], [group[i] for i in idx], [sku[i] for i in idx]


def plain_experiment_names(spec: ExperimentSpec, days: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """experiments' teams and groups as first written (the same draws in the same order, one name per job)."""
    h = np.arange(days * 24, dtype=np.float64)
    rate_h = spec.jobs_per_day / 24 * (1.0 + spec.daily_amplitude * np.sin(2 * np.pi * (h / 24 - 0.375)))
    counts = rng.poisson(np.maximum(rate_h, 0.0))
    n = int(counts.sum())
    rng.integers(0, 3600, size=n)
    sizes = np.array(sorted(spec.size_gpus), dtype=np.int64)
    p = np.array([spec.size_gpus[int(s)] for s in sizes], dtype=np.float64)
    rng.choice(sizes, size=n, p=p / p.sum())
    rng.lognormal(np.log(spec.duration_median_h), spec.duration_sigma, size=n)
    rng.random(n)
    teams = sorted(spec.teams)
    tp = np.array([spec.teams[t] for t in teams])
    team_idx = rng.choice(len(teams), size=n, p=tp / tp.sum())
    team = [teams[i] for i in team_idx.tolist()]
    return team, [f"experiments/{t}" for t in team]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    days=st.integers(1, 4),
    teams=st.lists(st.sampled_from(["a", "b", "ml-x", "vision", "z"]), min_size=1, max_size=4, unique=True),
    rates=st.lists(st.floats(1.0, 300.0), min_size=1, max_size=3),
    planned=st.integers(0, 3),
)
def test_job_names_are_the_per_job_loops(
    seed: int, days: int, teams: list[str], rates: list[float], planned: int
) -> None:
    rng = np.random.default_rng(seed)
    specs = [
        ExperimentSpec(
            sku=("h100_80gb" if i % 2 == 0 else "l40s"),
            jobs_per_day=r,
            teams={t: 1.0 + k for k, t in enumerate(teams)},
            size_gpus={1: 3.0, 8: 1.0},
        )
        for i, r in enumerate(rates)
    ]
    batches = []
    for spec in specs:
        state = rng.bit_generator.state
        b = demand.experiments(spec, days, rng)
        after = rng.bit_generator.state
        rng.bit_generator.state = state
        assert (b.team, b.group) == plain_experiment_names(spec, days, rng)
        assert rng.bit_generator.state == after
        assert type(b.team) is list and type(b.group) is list
        assert set(b.team) <= set(teams)  # each job's team is one of the spec's, its group named after it
        assert b.group == [f"experiments/{t}" for t in b.team]
        batches.append(b)
    runs = [
        PlannedRun(name=f"r{k}", team=teams[0], sku="h100_80gb", gpus=16, start_day=k % days, duration_days=1.0)
        for k in range(planned)
    ]
    batches.append(demand.planned(runs, rng))
    merged = demand.merge(batches)
    team, group, sku = plain_merge(batches)
    assert merged.team == team and merged.group == group and merged.sku == sku
    assert all(type(x) is str for x in merged.team + merged.group + merged.sku)
