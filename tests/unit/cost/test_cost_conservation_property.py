"""Property: whatever the capacity, allocations and rules, every ledger unit lands on exactly one line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.chargeback import chargeback
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, DistributionRule
from gpufleet.domain.pools import Tier

RULES = list(DistributionRule)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[CapacityBlock], list[AllocationSpan], int, int]:
    blocks: list[CapacityBlock] = []
    allocs: list[AllocationSpan] = []
    for p in range(draw(st.integers(1, 3))):
        tier = draw(st.sampled_from(list(Tier)))
        for b in range(draw(st.integers(1, 3))):
            start = draw(st.integers(0, 50_000))
            end = start + draw(st.integers(1, 50_000))
            gpus = draw(st.integers(1, 16))
            owner = draw(st.sampled_from([None, "owner-a", "owner-b"]))
            price = draw(st.integers(0, 20_000_000))
            blocks.append(CapacityBlock(f"b{p}{b}", f"p{p}", tier, "h100_80gb", gpus, start, end, price, owner))
            budget = gpus * PARTS_PER_GPU
            for k in range(draw(st.integers(0, 4))):
                if budget <= 0:
                    break
                parts = draw(st.integers(1, budget))
                budget -= parts
                s = draw(st.integers(start, end - 1))
                e = draw(st.integers(s + 1, end))
                team = draw(st.sampled_from(["t1", "t2", "t3"]))
                allocs.append(
                    AllocationSpan(
                        f"a{p}{b}{k}",
                        f"w{p}{b}{k}",
                        team,
                        team,
                        "ns",
                        "f",
                        f"p{p}",
                        "h100_80gb",
                        parts,
                        s,
                        e,
                        shared=draw(st.booleans()),
                    )
                )
    t0 = draw(st.integers(0, 60_000))
    t1 = t0 + draw(st.integers(1, 60_000))
    return blocks, allocs, t0, t1


@settings(max_examples=200, deadline=None)
@given(fleets(), st.sampled_from(RULES), st.sampled_from(RULES))
def test_allocated_plus_idle_equals_fleet_cost_exactly(
    fleet: tuple[list[CapacityBlock], list[AllocationSpan], int, int],
    idle_rule: DistributionRule,
    shared_rule: DistributionRule,
) -> None:
    blocks, allocs, t0, t1 = fleet
    r = allocate_costs(blocks, allocs, t0, t1, idle_rule=idle_rule, shared_rule=shared_rule)
    assert r.fleet_units == sum(b.cost_units(t0, t1) for b in blocks)
    assert r.direct_units + r.idle_units == r.fleet_units
    assert sum(ln.units for ln in r.lines) == r.fleet_units
    assert all(ln.units > 0 for ln in r.lines)
    for dim in ("team", "tier", "kind"):
        rep = chargeback(r, allocs, dim)
        assert sum(row.total_units for row in rep.rows) == r.fleet_units
