"""One metering: the simulator's per-segment ledger and the window books (the service's FinOps, `gpufleet cost`,
`bench cost`) are the same :class:`gpufleet.control.metering.Meter` and agree to the ledger unit."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.metering import PARTS_PER_GPU, AllocationSpan, CapacityBlock, Meter
from gpufleet.domain.pools import Tier

T_S = 86_400
segments = st.lists(
    st.tuples(st.sampled_from(["team-a", "team-b", "team-c"]), st.integers(1, 8), st.integers(0, T_S - 1),
              st.integers(1, T_S)),
    min_size=1,
    max_size=30,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(segments=segments, price=st.integers(1, 9_000_000), spare=st.integers(0, 64))
def test_ledger_charges_equal_the_books_direct_cost_and_idle_closes_the_pool(
    segments: list[tuple[str, int, int, int]], price: int, spare: int
) -> None:
    meter = Meter()
    spans = []
    for i, (team, gpus, start, dur) in enumerate(segments):
        end = min(T_S, start + dur)
        meter.charge(team=team, tenant="t", workload=f"w{i}", tier="reserved", price_uusd=price, gpus=gpus,
                     seconds=end - start)  # fmt: skip
        spans.append(AllocationSpan(f"a{i}", f"w{i}", team, "t", team, "-", "pool", "h100", gpus * PARTS_PER_GPU,
                                    start, end))  # fmt: skip
    peak = sum(g for _, g, _, _ in segments)
    block = CapacityBlock("res", "pool", Tier.RESERVED, "h100", peak + spare, 0, T_S, price)
    books = meter.allocate([block], spans, 0, T_S)
    direct: dict[str, int] = defaultdict(int)
    for line in books.lines:
        if line.kind.value == "direct":
            direct[line.team_id] += line.units
    assert dict(direct) == dict(meter.ledger.by_team)
    assert meter.ledger.allocated_units + books.idle_units == books.fleet_units == block.cost_units(0, T_S)
