"""Portfolio optimizer: serving never on spot, provider caps hold, hindsight agrees with brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gpufleet.procure.hindsight import hindsight_optimal
from gpufleet.procure.portfolio import (
    CommitTier,
    PairDemand,
    PortfolioProblem,
    hindsight_plan,
    optimize_portfolio,
    owned_tier,
)
from gpufleet.procure.replay import ReplayConfig, cost_of_commits


def _pair(serving: np.ndarray, training: np.ndarray, ckpt: np.ndarray, **kw: object) -> PairDemand:
    defaults: dict[str, object] = {
        "commit_tiers": (CommitTier("reserved", "aws", 0.634, 3, 1),),
        "on_demand_usd_per_gpu_h": 1.0,
        "spot_usd_per_gpu_h": 0.3,
        "spot_capacity_gpus": 1000.0,
    }
    defaults.update(kw)
    return PairDemand("h100_80gb", "us-east-1", serving, training, ckpt, **defaults)  # type: ignore[arg-type]


def test_serving_is_never_served_by_spot_even_when_spot_is_cheapest() -> None:
    serving = np.array([[10.0, 12.0, 8.0, 11.0]])
    zero = np.zeros_like(serving)
    p = _pair(serving, zero, zero, commit_tiers=(), spot_usd_per_gpu_h=0.01)
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0))
    # all serving demand bought on-demand at 1.0; spot (0.01) would have been 100x cheaper
    assert plan.objective_usd == pytest.approx(float(serving.sum()) * 1.0)


def test_checkpointable_training_uses_spot() -> None:
    ck = np.array([[10.0, 10.0]])
    zero = np.zeros_like(ck)
    p = _pair(zero, zero, ck, commit_tiers=())
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0))
    assert plan.objective_usd == pytest.approx(20.0 * 0.3)


def test_provider_share_cap_holds_and_has_a_premium() -> None:
    rng = np.random.default_rng(1)
    d = 50 + rng.uniform(0, 20, size=(2, 30))
    zero = np.zeros_like(d)
    tiers = (
        CommitTier("reserved", "aws", 0.634, 10, 1),
        CommitTier("secondary", "nebius", 0.8, 5, 1, max_gpus=200.0),
    )
    p = _pair(d, zero, zero, commit_tiers=tiers)
    free = optimize_portfolio(PortfolioProblem((p,), period_h=1.0))
    capped = optimize_portfolio(PortfolioProblem((p,), period_h=1.0, max_provider_share=0.6))
    assert free.provider_share["aws"] > 0.6
    assert all(s <= 0.6 + 1e-6 for s in capped.provider_share.values())
    assert capped.objective_usd >= free.objective_usd


def test_commit_budget_is_respected() -> None:
    d = np.full((1, 20), 100.0)
    zero = np.zeros_like(d)
    p = _pair(d, zero, zero, commit_tiers=(CommitTier("reserved", "aws", 0.634, 20, 0),))
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0, commit_budget_usd=500.0))
    assert plan.committed_cost_usd <= 500.0 + 1e-6


def test_serving_service_level_forces_firm_capacity_when_quota_is_short() -> None:
    serving = np.array([[10.0] * 6, [30.0] * 6])  # the p99 needs ~30 GPUs of firm capacity
    zero = np.zeros_like(serving)
    p = _pair(
        serving, zero, zero, on_demand_quota_gpus=12.0, commit_tiers=(CommitTier("reserved", "aws", 0.634, 6, 0),)
    )
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0, on_demand_reliable_share=1.0))
    cap = plan.capacity[p.key]["reserved"]
    assert np.all(cap >= np.quantile(serving, 0.99, axis=0) - 12.0 - 1e-6)
    assert plan.service_shortfall_gpu_h == pytest.approx(0.0)


def test_portfolio_hindsight_equals_the_replay_hindsight_on_one_pair() -> None:
    rng = np.random.default_rng(5)
    demand = np.round(rng.uniform(0, 5, 12), 1)
    cfg = ReplayConfig(
        term_h=4,
        lead_h=2,
        reserved_usd_per_gpu_h=0.634,
        on_demand_usd_per_gpu_h=1.0,
        spot_usd_per_gpu_h=0.3,
        secondary_usd_per_gpu_h=0.8,
    )
    zero = np.zeros_like(demand)
    p = _pair(zero[None, :], zero[None, :], zero[None, :], commit_tiers=(CommitTier("reserved", "aws", 0.634, 4, 2),))
    problem = PortfolioProblem((p,), period_h=1.0)
    plan = hindsight_plan(problem, [(demand, zero, zero)])
    lp_bound = hindsight_optimal(cfg, demand, method="lp").result.cost_usd
    assert plan.objective_usd == pytest.approx(lp_bound, rel=1e-6)


def test_integral_portfolio_matches_brute_force_on_a_small_case() -> None:
    demand = np.array([2.0, 3.0, 1.0, 3.0, 2.0])
    zero = np.zeros_like(demand)
    p = _pair(demand[None, :], zero[None, :], zero[None, :], commit_tiers=(CommitTier("reserved", "aws", 0.634, 2, 1),))
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0), integral=True)
    cfg = ReplayConfig(
        term_h=2,
        lead_h=1,
        reserved_usd_per_gpu_h=0.634,
        on_demand_usd_per_gpu_h=1.0,
        spot_usd_per_gpu_h=0.3,
        secondary_usd_per_gpu_h=0.8,
    )
    best = math.inf
    for combo in itertools.product(range(4), repeat=4):
        commits = np.array([*combo, 0.0])
        best = min(best, cost_of_commits(cfg, demand, commits).cost_usd)
    assert plan.objective_usd == pytest.approx(best, abs=1e-6)


def test_owned_capacity_wins_when_amortized_cost_is_lowest_and_decisions_are_explained() -> None:
    d = np.full((1, 40), 20.0)
    zero = np.zeros_like(d)
    owned = owned_tier(capex_usd_per_gpu=1000.0, amortization_h=5000.0, opex_usd_per_gpu_h=0.1, build_lead_periods=5)
    p = _pair(d, zero, zero, commit_tiers=(CommitTier("reserved", "aws", 0.634, 10, 0), owned))
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0))
    assert plan.capacity[p.key]["owned"][-1] == pytest.approx(20.0)
    owned_decisions = [x for x in plan.decisions if x.tier == "owned"]
    assert owned_decisions and owned_decisions[0].start_period >= 5  # not before its build lead time
    for x in plan.decisions:
        assert 0.0 <= x.expected_utilization <= 1.0 + 1e-9
        assert 0.0 <= x.demand_quantile_covered <= 1.0
        assert x.reason in {"expected_use_above_breakeven", "service_level_or_cap"}


def test_existing_commitments_reduce_what_is_bought_until_they_expire() -> None:
    d = np.full((1, 10), 10.0)
    zero = np.zeros_like(d)
    existing = np.array([10.0] * 5 + [0.0] * 5)
    p = _pair(d, zero, zero, commit_tiers=(CommitTier("reserved", "aws", 0.634, 5, 0),), existing_gpus=existing)
    plan = optimize_portfolio(PortfolioProblem((p,), period_h=1.0))
    cap = plan.capacity[p.key]["reserved"]
    assert cap[:5].sum() == pytest.approx(0.0)
    assert cap[5:] == pytest.approx(np.full(5, 10.0))


def test_pair_scoped_provider_cap_holds_in_every_pair() -> None:
    rng = np.random.default_rng(2)
    tiers = (
        CommitTier("reserved", "aws", 0.634, 10, 1),
        CommitTier("secondary", "nebius", 0.8, 5, 1, max_gpus=500.0),
    )
    pairs = []
    for i in range(2):
        d = 40 + 30 * i + rng.uniform(0, 10, size=(1, 20))
        zero = np.zeros_like(d)
        pairs.append(
            PairDemand("h100_80gb", f"r{i}", d, zero, zero, tiers, 1.0, spot_usd_per_gpu_h=0.3, spot_capacity_gpus=0.0)
        )
    plan = optimize_portfolio(
        PortfolioProblem(tuple(pairs), period_h=1.0, max_provider_share=0.7, provider_cap_scope="pair")
    )
    free = optimize_portfolio(PortfolioProblem(tuple(pairs), period_h=1.0))
    assert max(free.provider_share_by_pair[p.key]["aws"] for p in pairs) > 0.7
    for p in pairs:
        assert all(share <= 0.7 + 1e-6 for share in plan.provider_share_by_pair[p.key].values())
