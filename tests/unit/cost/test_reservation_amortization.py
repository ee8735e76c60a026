"""Reservations are amortized evenly over their term; what nobody held is reported as idle."""

from __future__ import annotations

import itertools
from decimal import Decimal

from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.model import AllocationSpan, CapacityBlock, gpu_parts
from gpufleet.domain.money import units_to_cents
from gpufleet.domain.reservations import Reservation

DAY = 86_400


def test_windows_that_tile_the_term_sum_to_the_reservation_price() -> None:
    res = Reservation("r", "pool", "h100_80gb", 16, 0, 3, Decimal("4.3619"))
    block = CapacityBlock.from_reservation(res)
    edges = [0, 7 * DAY, 31 * DAY, 40 * DAY + 17, res.end_s]
    parts = [block.cost_units(a, b) for a, b in itertools.pairwise(edges)]
    assert units_to_cents(sum(parts)) == res.est_cost_usd
    assert block.cost_units(res.end_s, res.end_s + DAY) == 0  # nothing after the term


def test_unused_part_of_a_reservation_is_idle() -> None:
    res = Reservation("r", "pool", "h100_80gb", 8, 0, 1, Decimal("4.00"))
    alloc = AllocationSpan("a", "w", "t", "t", "ns", "f", "pool", "h100_80gb", gpu_parts(6), 0, DAY)
    r = allocate_costs([CapacityBlock.from_reservation(res)], [alloc], 0, DAY)
    assert units_to_cents(r.direct_units) == Decimal("576.00")  # 6 GPUs * 24 h * $4
    assert units_to_cents(r.idle_units) == Decimal("192.00")  # the 2 unused GPUs
    assert r.pools[0].idle_gpu_h == 48.0
