"""A reservation that starts (or ends) inside a utilization bucket covers the part of the bucket it was active in."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.books import ReservedBlock, UtilRec, WorkloadInfo, build_books
from gpufleet.cost.model import CapacityBlock
from gpufleet.domain.pools import Tier

T0 = 1_767_225_600
RES_UUSD = 4_361_900
OD_UUSD = 6_880_000
RES_POOL = "aws/us-east-1/h100_80gb/reserved"
OD_POOL = "aws/us-east-1/h100_80gb/on_demand"
OD = {"h100_80gb": (OD_POOL, OD_UUSD)}
POOLS = {RES_POOL: (Tier.RESERVED, RES_UUSD), OD_POOL: (Tier.ON_DEMAND, OD_UUSD)}
WLS = {"a": WorkloadInfo("a", "team-a", "tenant-a", "serving", "feat-a")}


def _tier_gpu_s(capacity: Sequence[CapacityBlock], tier: Tier, t0: int, t1: int) -> int:
    return sum(b.gpus * (min(b.end_s, t1) - max(b.start_s, t0)) for b in capacity if b.tier is tier)


@pytest.mark.parametrize("pool_id", [None, RES_POOL])
def test_a_reservation_starting_mid_bucket_covers_the_rest_of_that_bucket(pool_id: str | None) -> None:
    """Review (fixed), the defect: ``build_books`` cut a SKU's time only at its records' starts and ends (and price
    changes) and let a sub-interval ride only the reservations active over all of it, so a reservation starting
    inside a bucket was not used for that bucket: the whole bucket was billed on-demand while the reservation's
    covered share was booked idle (here a whole hour of 8 on-demand GPUs instead of half). Now the reservation's
    start and end cut the bucket, and it covers the share after it started."""
    # 8 GPUs held all hour (the record names the reserved pool, or no pool); an 8-GPU reservation starts half-way
    recs = [UtilRec("a", "team-a", "h100_80gb", T0, 3600, 8.0, 0.5, pool_id)]
    res = [ReservedBlock("res_1", RES_POOL, "h100_80gb", 8, T0 + 1800, T0 + 86_400 * 365, RES_UUSD)]
    books = build_books(recs, WLS, res, OD, T0, T0 + 3600, POOLS)
    cost = allocate_costs(books.capacity, books.allocations, T0, T0 + 3600)
    # the second half rides the reservation (paid for anyway); only the first half is on-demand
    assert _tier_gpu_s(books.capacity, Tier.ON_DEMAND, T0, T0 + 3600) == 8 * 1800
    assert cost.fleet_units == 8 * RES_UUSD * 1800 + 8 * OD_UUSD * 1800
    assert cost.idle_units == 0
    assert cost.direct_units + cost.idle_units == cost.fleet_units
    # two allocations (on-demand, then reserved), each with the bucket's one sample; busy GPU-seconds are not doubled
    assert [(a.pool_id, a.start_s, a.end_s) for a in books.allocations] == [
        (OD_POOL, T0, T0 + 1800),
        (RES_POOL, T0 + 1800, T0 + 3600),
    ]
    assert list(books.usage.samples) == [1, 1]
    assert sum(books.usage.used_gpu_s) == pytest.approx(8 * 0.5 * 3600)


def test_a_reservation_ending_mid_bucket_covers_the_start_of_that_bucket() -> None:
    """Review (fixed), the defect: the same for a reservation ending inside a bucket: its last 15 minutes were paid
    and idle, and the bucket's 4 GPUs were billed on-demand for the whole hour."""
    recs = [UtilRec("a", "team-a", "h100_80gb", T0, 3600, 4.0, 1.0)]
    res = [ReservedBlock("res_1", RES_POOL, "h100_80gb", 4, T0 - 86_400, T0 + 900, RES_UUSD)]
    books = build_books(recs, WLS, res, OD, T0, T0 + 3600)
    cost = allocate_costs(books.capacity, books.allocations, T0, T0 + 3600)
    assert _tier_gpu_s(books.capacity, Tier.ON_DEMAND, T0, T0 + 3600) == 4 * 2700
    assert cost.fleet_units == 4 * RES_UUSD * 900 + 4 * OD_UUSD * 2700
    assert cost.idle_units == 0
