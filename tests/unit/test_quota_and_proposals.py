"""Quota outlook dates against a hand-computed example; proposals timed by lead time."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.cli.cmd_plan import builtin_pair_of
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError
from gpufleet.procure.planning import pair_of, plan_from_history
from gpufleet.procure.portfolio import CommitTier, PairDemand, PortfolioProblem, optimize_portfolio
from gpufleet.procure.proposals import ExistingCommitment, proposals_from_plan
from gpufleet.procure.quota import quota_outlook

DAY = 86400
JAN1 = 1_767_225_600  # 2026-01-01T00:00:00Z


def test_quota_outlook_matches_a_hand_computed_example() -> None:
    # demand grows 10 GPUs a day from 100; quota 150 -> first day above quota is day 6 (160 > 150),
    # i.e. 2026-01-07; with a 3-day lead time for an increase the request is due 2026-01-04.
    forecast = 100 + 10 * np.arange(30)
    out = quota_outlook(
        "aws/us-east-1/h100_80gb/on_demand",
        forecast,
        start_s=JAN1,
        period_s=DAY,
        quota_gpus=150,
        increase_lead_time_s=3 * DAY,
        now_s=JAN1,
        warn_s=1 * DAY,
    )
    assert out.exhausts_at_s == JAN1 + 6 * DAY
    assert out.request_by_s == JAN1 + 3 * DAY
    assert out.headroom_gpus_now == 50
    assert out.reason == "on_track"


@pytest.mark.parametrize(
    ("now_offset_days", "reason"), [(0, "on_track"), (2.5, "request_now"), (4, "overdue"), (6, "exhausted")]
)
def test_quota_outlook_reason_follows_the_clock(now_offset_days: float, reason: str) -> None:
    out = quota_outlook(
        "p",
        100 + 10 * np.arange(30),
        start_s=0,
        period_s=DAY,
        quota_gpus=150,
        increase_lead_time_s=3 * DAY,
        now_s=int(now_offset_days * DAY),
        warn_s=1 * DAY,
    )
    assert out.reason == reason


def test_quota_outlook_without_quota_or_exhaustion() -> None:
    f = np.full(10, 5.0)
    assert quota_outlook("p", f, start_s=0, period_s=DAY, quota_gpus=None, increase_lead_time_s=0, now_s=0).reason == (
        "no_quota"
    )
    assert quota_outlook("p", f, start_s=0, period_s=DAY, quota_gpus=10, increase_lead_time_s=0, now_s=0).reason == (
        "not_exhausted"
    )
    with pytest.raises(ValidationError):
        quota_outlook("p", [], start_s=0, period_s=DAY, quota_gpus=10, increase_lead_time_s=0, now_s=0)


def _problem() -> PortfolioProblem:
    d = np.full((1, 60), 64.0)
    zero = np.zeros_like(d)
    tier = CommitTier("reserved_1y", "aws", 0.634, 30, 10)
    pair = PairDemand(
        "h100_80gb", "us-east-1", d, zero, zero, (tier,), 1.0, existing_gpus=np.array([32.0] * 20 + [0.0] * 40)
    )
    return PortfolioProblem((pair,))


def test_proposals_enter_approval_one_lead_time_before_start() -> None:
    problem = _problem()
    plan = optimize_portfolio(problem)
    props = proposals_from_plan(problem, plan, start_s=JAN1)
    reserves = [p for p in props if p.action in ("reserve", "renew")]
    assert reserves
    for p in reserves:
        assert p.submit_by_s == p.start_s - 10 * DAY
        assert p.units % 8 == 0 and p.units > 0
        assert p.est_cost_usd > 0 and p.rationale


def test_expiring_commitment_is_renewed_when_the_plan_buys_it_again() -> None:
    problem = _problem()
    plan = optimize_portfolio(problem)
    existing = (ExistingCommitment("h100_80gb@us-east-1", "reserved_1y", 32, 20),)
    props = proposals_from_plan(problem, plan, start_s=JAN1, existing=existing)
    assert any(p.action == "renew" for p in props)
    assert not any(p.action == "let_expire" for p in props)


def test_expiring_commitment_is_let_expire_when_demand_is_gone() -> None:
    d = np.concatenate([np.full(20, 32.0), np.zeros(40)])[None, :]
    zero = np.zeros_like(d)
    tier = CommitTier("reserved_1y", "aws", 0.634, 30, 10)
    pair = PairDemand(
        "h100_80gb", "us-east-1", d, zero, zero, (tier,), 1.0, existing_gpus=np.array([32.0] * 20 + [0.0] * 40)
    )
    problem = PortfolioProblem((pair,))
    plan = optimize_portfolio(problem)
    props = proposals_from_plan(
        problem, plan, start_s=JAN1, existing=(ExistingCommitment(pair.key, "reserved_1y", 32, 20),)
    )
    assert [p.action for p in props] == ["let_expire"]


def test_plan_from_history_reports_coverage_and_quota() -> None:
    rng = np.random.default_rng(0)
    hist = {"h100_80gb@us-east-1": 100 + rng.normal(0, 5, 28 * 24)}
    rep = plan_from_history(hist, start_s=JAN1, horizon_days=90, on_demand_quota_gpus=105)
    assert rep.quotas[0].reason in {"exhausted", "overdue", "request_now", "on_track"}
    cov = rep.coverage["h100_80gb@us-east-1"]
    assert 0.0 < cov["coverage"] <= 1.0 and 0.0 < cov["utilization"] <= 1.0 + 1e-9


def test_the_offline_plan_knows_the_builtin_regions_and_the_planner_does_not_restrict_them() -> None:
    assert builtin_pair_of("l40s@us-west-2") == ("l40s", "us-west-2")
    assert builtin_pair_of("pods") == ("h100_80gb", "us-east-1")  # a bare id
    with pytest.raises(
        ValidationError, match=r"unknown region 'us-esat-1' in 'h100_80gb@us-esat-1' \(known: us-east-1,"
    ):
        builtin_pair_of("h100_80gb@us-esat-1")
    with pytest.raises(ValidationError, match="unknown SKU 'h200'"):
        pair_of("h200@us-east-1", prices=BUILTIN_PRICE_CATALOG)
    # plan_from_history itself does not restrict the region (only the offline CLI's check does)
    rep = plan_from_history({"h100_80gb@onprem-a": np.full(28 * 24, 100.0)}, start_s=JAN1, horizon_days=60)
    assert rep.proposals and {r for p in rep.proposals for r in p.regions} == {"onprem-a"}


def test_due_proposals_are_the_orders_to_submit_within_a_week() -> None:
    from gpufleet.procure.proposals import due_proposals

    rng = np.random.default_rng(1)
    rep = plan_from_history({"h100_80gb@us-east-1": 300 + rng.normal(0, 10, 28 * 24)}, start_s=JAN1, horizon_days=120)
    due = due_proposals(rep.proposals, now_s=JAN1)
    assert due and all(p.submit_by_s <= JAN1 + 7 * DAY and p.action in ("reserve", "renew") for p in due)
