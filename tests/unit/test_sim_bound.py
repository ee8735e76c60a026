"""The hindsight bound: an exact LP optimum (brute force and procure.hindsight agree) and a true lower bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpufleet.control.commitments import CommitmentProblem, solve_commitments
from gpufleet.domain.errors import ValidationError
from gpufleet.procure.hindsight import hindsight_optimal
from gpufleet.procure.replay import ReplayConfig
from gpufleet.sim.bound import hourly_mean

PRICES = {"reserved": 4.0, "spot": 1.5, "secondary": 3.0, "on_demand": 7.0}


def _input(d: list[float], ckpt: list[float], initial: list[float], lead: int, term: int) -> CommitmentProblem:
    return CommitmentProblem(
        np.asarray(d, dtype=float),
        np.asarray(ckpt, dtype=float),
        np.asarray(initial, dtype=float),
        term_h=term,
        lead_h=lead,
        reserved_usd_per_gpu_h=PRICES["reserved"],
        spot_usd_per_gpu_h=PRICES["spot"],
        secondary_usd_per_gpu_h=PRICES["secondary"],
        on_demand_usd_per_gpu_h=PRICES["on_demand"],
        spot_capacity_gpus=1.0,
        secondary_capacity_gpus=1.0,
    )


def _brute_force(p: CommitmentProblem) -> float:
    """Every integer commitment schedule; each hour's overflow bought cheapest-first within the tiers' limits."""
    n = len(p.demand_gpus)
    n_c = n - p.lead_h
    best = float("inf")
    for commits in itertools.product(range(int(p.demand_gpus.max()) + 1), repeat=n_c):
        cost = p.reserved_usd_per_gpu_h * float(p.initial_reserved_gpus.sum())
        active = np.zeros(n)
        for s, c in enumerate(commits):
            active[s + p.lead_h : s + p.lead_h + p.term_h] += c
            cost += c * p.reserved_usd_per_gpu_h * min(p.term_h, n - s - p.lead_h)
        for t in range(n):
            need = max(p.demand_gpus[t] - p.initial_reserved_gpus[t] - active[t], 0.0)
            spot = min(need, p.checkpointable_gpus[t], p.spot_capacity_gpus)
            sec = min(need - spot, p.secondary_capacity_gpus)
            od = need - spot - sec
            cost += spot * p.spot_usd_per_gpu_h + sec * p.secondary_usd_per_gpu_h + od * p.on_demand_usd_per_gpu_h
        best = min(best, cost)
    return best


@pytest.mark.parametrize(
    ("d", "ckpt", "initial"),
    [
        ([1, 3, 4, 4, 2, 3, 0], [0, 1, 2, 0, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0]),
        ([0, 2, 4, 4, 4, 1, 4], [0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]),
        ([3, 3, 3, 3, 3, 3, 3], [3, 3, 3, 3, 3, 3, 3], [2, 2, 2, 2, 2, 2, 2]),
    ],
)
def test_bound_equals_brute_force_on_a_tiny_case(d: list[float], ckpt: list[float], initial: list[float]) -> None:
    p = _input(d, ckpt, initial, lead=1, term=3)
    b = solve_commitments(p)
    assert b.cost_usd == pytest.approx(_brute_force(p), abs=1e-6)
    assert sum(b.cost_by_tier_usd.values()) == pytest.approx(b.cost_usd, abs=1e-6)


def test_bound_matches_procure_hindsight_with_constant_capacities() -> None:
    rng = np.random.default_rng(3)
    d = np.round(40 + 20 * np.sin(np.arange(400) / 24 * 2 * np.pi) + rng.normal(0, 5, 400)).clip(0) * 2
    cfg = ReplayConfig(
        term_h=168,
        lead_h=24,
        reserved_usd_per_gpu_h=4.0,
        on_demand_usd_per_gpu_h=7.0,
        spot_usd_per_gpu_h=1.5,
        secondary_usd_per_gpu_h=3.0,
        checkpointable_share=0.5,
        spot_capacity_gpus=10.0,
        secondary_capacity_gpus=8.0,
    )
    p = CommitmentProblem(
        d, 0.5 * d, np.zeros(len(d)), 168, 24, 4.0, 1.5, 3.0, 7.0, spot_capacity_gpus=10.0, secondary_capacity_gpus=8.0
    )
    assert solve_commitments(p).cost_usd == pytest.approx(hindsight_optimal(cfg, d).result.cost_usd, rel=1e-7)


def test_hourly_mean_integrates_intervals_exactly() -> None:
    # 2 GPUs from 0:30 to 2:15 and 8 GPUs for the second hour
    got = hourly_mean(np.array([1800.0, 3600.0]), np.array([8100.0, 7200.0]), np.array([2.0, 8.0]), 3)
    assert got == pytest.approx([1.0, 10.0, 0.5])


def test_bad_demand_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="demand_gpus"):
        solve_commitments(_input([1.0, -1.0], [0.0, 0.0], [0.0, 0.0], lead=0, term=1))
