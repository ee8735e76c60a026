"""Cost allocation on a hand-computed example: a partly used reservation, a half GPU, a MIG slice, shared idle.

Window: 10 hours. Pools and what they cost (by hand):
  reserved H100 pool, 8 GPUs at $4.00/GPU-h (a 1-month reservation, amortized): 8 * 4 * 10 = $320.00
  on-demand H100 pool, 2 GPUs at $6.00/GPU-h:                                     2 * 6 * 10 = $120.00   fleet $440.00
Allocations (direct = share * price * hours):
  a1 search  4 GPUs   reserved  10 h -> $160.00        a2 ads   2 GPUs   reserved 5 h -> $40.00
  a3 ads     1/2 GPU  on-demand 10 h -> $30.00         a4 search MIG 1/7 on-demand 7 h -> $6.00
  a5 platform shared gateway 1 GPU on-demand 10 h -> $60.00
Idle: reserved 80 - 40 - 10 = 30 GPU-h -> $120.00 (the unused part of the reservation);
      on-demand 20 - 16 = 4 GPU-h -> $24.00.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from gpufleet.cost.allocate import allocate_costs, apportion
from gpufleet.cost.chargeback import chargeback, serving_unit_costs
from gpufleet.cost.meter import meter_usage
from gpufleet.cost.model import (
    IDLE_OWNER,
    SHARED_OWNER,
    AllocationSpan,
    CapacityBlock,
    DistributionRule,
    UsageColumns,
    gpu_parts,
)
from gpufleet.domain.errors import NotFoundError, ValidationError
from gpufleet.domain.money import price_to_uusd, units_to_cents
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import Reservation

H = 3600
T0, T1 = 100 * H, 110 * H
RES = Reservation("res-1", "res", "h100_80gb", 8, 0, 1, Decimal("4.00"))

CAPACITY = [
    CapacityBlock.from_reservation(RES, owner_team_id="platform"),
    CapacityBlock("od-1", "od", Tier.ON_DEMAND, "h100_80gb", 2, T0, T1, price_to_uusd("6.00")),
]


def _span(aid: str, wid: str, team: str, feature: str, pool: str, parts: int, hours: int, **kw: bool) -> AllocationSpan:
    return AllocationSpan(
        aid, wid, team, f"t-{team}", f"ns-{team}", feature, pool, "h100_80gb", parts, T0, T0 + hours * H, **kw
    )


ALLOCS = [
    _span("a1", "train-1", "search", "ranking", "res", gpu_parts(4), 10),
    _span("a2", "train-2", "ads", "bidding", "res", gpu_parts(2), 5),
    _span("a3", "serve-ads", "ads", "bidding", "od", gpu_parts(num=1, den=2), 10, serving=True),
    _span("a4", "nb-4", "search", "notebooks", "od", gpu_parts(num=1, den=7), 7),
    _span("a5", "gateway", "platform", "gateway", "od", gpu_parts(1), 10, shared=True),
]


def _usd(units: int) -> Decimal:
    return units_to_cents(units)


def _by(result: object, dim: str) -> dict[str, Decimal]:
    rep = chargeback(result, ALLOCS, dim)  # type: ignore[arg-type]
    return {r.key: r.total_usd for r in rep.rows}


def test_fleet_direct_and_idle_match_the_hand_computation() -> None:
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1)
    assert _usd(r.fleet_units) == Decimal("440.00")
    assert {k: _usd(v) for k, v in r.direct_by_allocation.items()} == {
        "a1": Decimal("160.00"), "a2": Decimal("40.00"), "a3": Decimal("30.00"),
        "a4": Decimal("6.00"), "a5": Decimal("60.00"),
    }  # fmt: skip
    pools = {p.pool_id: p for p in r.pools}
    assert _usd(pools["res"].idle_units) == Decimal("120.00")
    assert pools["res"].idle_gpu_h == pytest.approx(30.0)
    assert _usd(pools["od"].idle_units) == Decimal("24.00")
    assert r.conserved


def test_separate_lines_keep_idle_and_shared_apart() -> None:
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, idle_rule=DistributionRule.SEPARATE_LINE,
                       shared_rule=DistributionRule.SEPARATE_LINE)  # fmt: skip
    assert _by(r, "team") == {
        "search": Decimal("166.00"), "ads": Decimal("70.00"),
        IDLE_OWNER: Decimal("144.00"), SHARED_OWNER: Decimal("60.00"),
        "platform": Decimal("0.00"),  # held the gateway's GPU-hours; its cost is on the shared line
    }  # fmt: skip
    assert r.conserved


def test_proportional_spreads_pool_idle_and_shared_cost_to_the_cent() -> None:
    # idle res $120 over a1:a2 = 160:40 -> 96 / 24; idle od $24 over a3:a4 = 30:6 -> 20 / 4 (the shared gateway
    # receives none); shared $60 over 160:40:30:6 (236) -> 40.6780, 10.1695, 7.6271, 1.5254
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, idle_rule=DistributionRule.PROPORTIONAL,
                       shared_rule=DistributionRule.PROPORTIONAL)  # fmt: skip
    # search = 160 + 96 + 40.6780 + 6 + 4 + 1.5254 = 308.2034; ads = 40 + 24 + 10.1695 + 30 + 20 + 7.6271 = 131.7966
    assert _by(r, "team") == {"search": Decimal("308.20"), "ads": Decimal("131.80"), "platform": Decimal("0.00")}
    # train-1 296.6780, train-2 74.1695, serve-ads 57.6271, nb-4 11.5254: each rounded alone they make $440.01, so
    # the cents are apportioned by largest remainder (.95, .80, .71 get one; .54 does not) to add up to $440.00
    assert _by(r, "workload") == {
        "train-1": Decimal("296.68"), "train-2": Decimal("74.17"),
        "serve-ads": Decimal("57.63"), "nb-4": Decimal("11.52"), "gateway": Decimal("0.00"),
    }  # fmt: skip
    assert sum(_by(r, "workload").values()) == Decimal("440.00")
    assert r.conserved


def test_to_owner_sends_reservation_idle_to_its_owner_and_shared_to_its_team() -> None:
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, idle_rule=DistributionRule.TO_OWNER,
                       shared_rule=DistributionRule.TO_OWNER)  # fmt: skip
    # platform: reservation idle 120 + its gateway 60; the on-demand block has no owner -> idle line
    assert _by(r, "team") == {
        "platform": Decimal("180.00"),
        "search": Decimal("166.00"),
        "ads": Decimal("70.00"),
        IDLE_OWNER: Decimal("24.00"),
    }


def test_fractional_shares_are_charged_by_share_and_shown_against_measured_use() -> None:
    # hourly buckets: a1 busy 50 %, a3 (half GPU) busy 80 % of its half, a4 (MIG 1/7) busy 100 %
    buckets = np.arange(10, dtype=np.int32)
    cols = {0: (buckets, 0.5), 2: (buckets, 0.8), 3: (buckets[:7], 1.0)}
    b = np.concatenate([v[0] for v in cols.values()])
    a = np.concatenate([np.full(len(v[0]), k, dtype=np.int32) for k, v in cols.items()])
    u = np.concatenate([np.full(len(v[0]), v[1], dtype=np.float32) for v in cols.values()])
    usage = UsageColumns(T0, H, b, a, u)
    totals = meter_usage(usage, np.array([x.parts for x in ALLOCS], dtype=np.int64), T0, T1)
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, shared_rule=DistributionRule.SEPARATE_LINE)
    rows = {row.key: row for row in chargeback(r, ALLOCS, "workload", totals).rows}
    assert rows["serve-ads"].allocated_gpu_h == pytest.approx(5.0)
    assert rows["serve-ads"].used_gpu_h == pytest.approx(4.0)
    assert rows["nb-4"].allocated_gpu_h == pytest.approx(1.0)
    assert rows["nb-4"].used_gpu_h == pytest.approx(1.0)
    assert rows["train-1"].utilization == pytest.approx(0.5)
    assert rows["serve-ads"].total_usd == Decimal("30.00")


def test_csv_export_has_a_total_row_equal_to_the_fleet_cost() -> None:
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, idle_rule=DistributionRule.PROPORTIONAL)
    csv_text = chargeback(r, ALLOCS, "feature", mode="showback").to_csv()
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("feature,allocated_gpu_h,used_gpu_h")
    assert lines[-1].split(",")[0] == "TOTAL"
    assert lines[-1].split(",")[-1] == "440.00"


def test_cost_per_million_tokens_for_serving() -> None:
    # serve-ads: $30 direct; idle and shared kept on their own lines
    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, shared_rule=DistributionRule.SEPARATE_LINE)
    (uc,) = serving_unit_costs(r, {"serve-ads": 60_000_000})
    assert uc.usd_per_million_tokens == Decimal("0.5000")


def test_over_allocated_pool_is_refused() -> None:
    too_many = [*ALLOCS, AllocationSpan("a6", "x", "x", "x", "x", "x", "od", "h100_80gb", gpu_parts(1), T0, T1)]
    with pytest.raises(ValidationError, match="paid for"):
        allocate_costs(CAPACITY, too_many, T0, T1)


def test_apportion_is_exact_and_deterministic() -> None:
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert sum(apportion(10**20 + 7, [3, 5, 11, 0])) == 10**20 + 7


def test_workload_cost_view_for_the_api() -> None:
    from gpufleet.cost.workload_cost import workload_cost

    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, idle_rule=DistributionRule.PROPORTIONAL,
                       shared_rule=DistributionRule.PROPORTIONAL)  # fmt: skip
    v = workload_cost("train-1", r, ALLOCS)
    assert (v.direct_usd, v.idle_usd, v.shared_usd, v.total_usd) == (
        Decimal("160.00"), Decimal("96.00"), Decimal("40.68"), Decimal("296.68"))  # fmt: skip
    assert v.allocated_gpu_h == 40.0 and v.used_gpu_h is None and v.team_id == "search"
    with pytest.raises(NotFoundError):
        workload_cost("nope", r, ALLOCS)


def test_budget_spend_comes_from_the_cost_lines() -> None:
    from gpufleet.cost.budgets import Budget, BudgetUnit, spend_for_budgets

    r = allocate_costs(CAPACITY, ALLOCS, T0, T1, shared_rule=DistributionRule.SEPARATE_LINE)
    budgets = [
        Budget("b1", "team", "search", BudgetUnit.USD, Decimal("100"), T0, T1),
        Budget("b2", "feature", "bidding", BudgetUnit.GPU_H, Decimal("10"), T0, T1),
    ]
    spend = spend_for_budgets(budgets, r.lines, ALLOCS, r.part_s_by_allocation)
    assert units_to_cents(spend["b1"].units) == Decimal("166.00")
    assert spend["b2"].gpu_h == 15.0  # a2: 2 GPUs * 5 h + a3: 1/2 GPU * 10 h
