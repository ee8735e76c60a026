"""The hindsight bound equals a brute-force search on small cases; no policy beats it; costs are priced."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.bench.procure import ProcurerPolicy
from gpufleet.control.procurement import ForecastLedProcurer
from gpufleet.procure.hindsight import hindsight_optimal
from gpufleet.procure.policies import baseline_policies, units_worth_committing
from gpufleet.procure.replay import ReplayConfig, cost_of_commits, replay


def _cfg(term_h: int = 3, lead_h: int = 1, **kw: float) -> ReplayConfig:
    prices: dict[str, float] = {
        "reserved_usd_per_gpu_h": 0.634,
        "on_demand_usd_per_gpu_h": 1.0,
        "spot_usd_per_gpu_h": 0.3,
        "secondary_usd_per_gpu_h": 0.8,
    }
    prices.update(kw)
    return ReplayConfig(term_h=term_h, lead_h=lead_h, **prices)  # type: ignore[arg-type]


def _brute_force(cfg: ReplayConfig, demand: np.ndarray, max_units: int) -> float:
    n_commit = len(demand) - cfg.lead_h
    best = math.inf
    for combo in itertools.product(range(max_units + 1), repeat=n_commit):
        commits = np.zeros(len(demand))
        commits[:n_commit] = combo
        best = min(best, cost_of_commits(cfg, demand, commits).cost_usd)
    return best


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 3.0, allow_nan=False).map(lambda x: round(x, 2)), min_size=4, max_size=6))
def test_hindsight_matches_brute_force_with_on_demand_only(values: list[float]) -> None:
    demand = np.asarray(values)
    cfg = _cfg()
    sol = hindsight_optimal(cfg, demand)
    assert sol.result.cost_usd == pytest.approx(_brute_force(cfg, demand, 3), abs=1e-6)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.integers(0, 3).map(float), min_size=4, max_size=5),
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, 1.0, 2.0]),
)
def test_hindsight_matches_brute_force_with_quota_spot_and_secondary(
    values: list[float], share: float, quota: float
) -> None:
    demand = np.asarray(values)
    cfg = _cfg(
        on_demand_quota_gpus=quota,
        checkpointable_share=share,
        spot_capacity_gpus=1.0,
        secondary_capacity_gpus=1.0,
    )
    sol = hindsight_optimal(cfg, demand)
    assert sol.result.cost_usd == pytest.approx(_brute_force(cfg, demand, 3), abs=1e-6)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {
            "on_demand_quota_gpus": 55.0,
            "checkpointable_share": 0.3,
            "spot_capacity_gpus": 8.0,
            "secondary_capacity_gpus": 5.5,
        },
    ],
)
def test_exact_segment_lp_agrees_with_the_milp_on_a_longer_series(extra: dict[str, float]) -> None:
    rng = np.random.default_rng(7)
    t = np.arange(24 * 10)
    demand = np.maximum(50 + 20 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 5, len(t)), 0)
    cfg = _cfg(term_h=48, lead_h=6, **extra)
    fast = hindsight_optimal(cfg, demand)
    slow = hindsight_optimal(cfg, demand, method="milp", time_limit_s=60)
    relaxed = hindsight_optimal(cfg, demand, method="lp")
    assert fast.result.cost_usd == pytest.approx(slow.result.cost_usd, rel=1e-6)
    assert fast.lp_objective_usd == pytest.approx(fast.result.cost_usd, rel=1e-9)
    assert relaxed.result.cost_usd <= fast.result.cost_usd + 1e-6
    assert np.allclose(fast.result.commits, np.round(fast.result.commits))


def test_no_online_policy_beats_the_hindsight_bound() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(24 * 12)
    demand = np.maximum(30 + 10 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 3, len(t)), 0)
    cfg = _cfg(term_h=72, lead_h=12)
    opt = hindsight_optimal(cfg, demand).result.cost_usd
    for p in [ProcurerPolicy(ForecastLedProcurer(), "gpufleet"), *baseline_policies()]:
        res = replay(cfg, demand, p)  # type: ignore[arg-type]
        assert res.cost_usd >= opt - 1e-6, p
        assert res.unmet_gpu_h == 0.0


def test_unmet_demand_is_priced_never_free() -> None:
    cfg = _cfg(on_demand_quota_gpus=1.0)
    res = cost_of_commits(cfg, np.array([3.0, 3.0]), np.zeros(2))
    assert res.unmet_gpu_h == pytest.approx(4.0)
    assert res.cost_by_tier_usd["unmet"] == pytest.approx(4.0 * 3.0)


def test_replay_and_cost_of_commits_agree() -> None:
    demand = np.array([2.0, 5.0, 5.0, 4.0, 1.0, 6.0])
    cfg = _cfg(term_h=3, lead_h=1)
    res = replay(cfg, demand, ProcurerPolicy(ForecastLedProcurer(min_history_h=1), "gpufleet"))
    again = cost_of_commits(cfg, demand, res.commits)
    assert again.cost_usd == pytest.approx(res.cost_usd)


def test_units_worth_committing_is_the_break_even_quantile() -> None:
    excess = np.arange(100, dtype=float)  # GPU k is used when excess >= k
    k = units_worth_committing(excess, 0.634)
    used = np.clip(excess - (k - 1), 0, 1).mean()
    used_next = np.clip(excess - k, 0, 1).mean()
    assert used >= 0.634 > used_next
