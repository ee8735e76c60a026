"""Review: the FinOps books (``cost/books.py`` ``build_books`` then ``cost/allocate.py`` ``allocate_costs``) over
random stored utilization: buckets of mixed lengths and starts, some naming a pool, reservations, a price change.

Whatever the records, the books must be built (a reader of any cost route must not get a 422 about an internal
allocation), every ledger unit must land on one line, each workload must be charged exactly the GPU-seconds its
records held inside the window, and no reservation may be held by more GPUs than it has at any moment.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.books import ReservedBlock, UtilRec, build_books
from gpufleet.cost.chargeback import chargeback
from gpufleet.cost.model import PARTS_PER_GPU
from gpufleet.domain.pools import Tier

SKU = "h100_80gb"
OD = ("od", 6_000_000)
POOLS = {"resv": (Tier.RESERVED, 2_000_000), "od": (Tier.ON_DEMAND, 6_000_000), "spot": (Tier.SPOT, 3_000_000)}
T0, T1 = 3600, 4 * 3600


@st.composite
def stored(draw: st.DrawFn) -> tuple[list[UtilRec], list[ReservedBlock]]:
    recs: list[UtilRec] = []
    for w in range(draw(st.integers(1, 4))):
        bucket = draw(st.sampled_from([300, 900, 1800, 3600, 7200]))
        first = draw(st.integers(0, 3 * 3600 // 300)) * 300
        pool = draw(st.sampled_from([None, None, "resv", "spot"]))
        for k in range(draw(st.integers(1, 6))):
            start = first + k * bucket
            gpus = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0, 8.0]))
            util = draw(st.sampled_from([0.0, 0.3, 1.0, float("nan")]))
            recs.append(UtilRec(f"w{w}", f"t{w % 2}", SKU, start, bucket, gpus, util, pool))
    blocks = [ReservedBlock(f"r{i}", "resv", SKU, draw(st.integers(1, 8)), 0, 10 * 3600, 2_000_000)
              for i in range(draw(st.integers(0, 2)))]  # fmt: skip
    return recs, blocks


def _held_gpu_s(recs: list[UtilRec], workload: str) -> float:
    return sum(r.gpus * max(0, min(r.start_s + r.bucket_s, T1) - max(r.start_s, T0)) for r in recs
               if r.workload_id == workload)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(stored())
def test_books_of_any_stored_utilization_are_built_conserved_and_never_over_a_reservation(
    data: tuple[list[UtilRec], list[ReservedBlock]],
) -> None:
    """Review (fixed), the defect: ``build_books`` fills the reservations bucket START by bucket start, each group
    with the whole reservation free again. Records that overlap in time but start at different moments (an hourly
    record of one workload and the 5-minute records of another starting at :05, or hourly records at :00 and :30)
    each take the reservation in full: the books hold 16 GPUs of an 8-GPU reservation, ``allocate_costs`` refuses
    them as over-allocated, and every cost read of the service (workload cost, /metrics, the dashboard) answers 422
    naming an internal allocation."""
    recs, blocks = data
    books = build_books(recs, {}, blocks, {SKU: OD}, T0, T1, POOLS)
    res = allocate_costs(books.capacity, books.allocations, T0, T1)
    assert res.conserved
    for dim in ("team", "workload", "pool"):
        assert sum(r.total_units for r in chargeback(res, books.allocations, dim, books.usage).rows) == res.fleet_units
    held: dict[str, int] = {}
    for a in books.allocations:
        held[a.workload_id] = held.get(a.workload_id, 0) + res.part_s_by_allocation.get(a.id, 0)
    for w in {r.workload_id for r in recs}:
        want = _held_gpu_s([r for r in recs if r.pool_id != "resv" or blocks], w)
        if any(r.workload_id == w and r.pool_id == "resv" for r in recs) and not blocks:
            continue  # a reserved pool with no reservation in force: its records fall to on-demand, checked below
        assert held.get(w, 0) / PARTS_PER_GPU == pytest.approx(want), w


def test_an_hourly_and_a_five_minute_workload_share_a_reservation_without_over_holding_it() -> None:
    """The example behind the property: 8 reserved GPUs; workload A holds 8 in an hourly record from :00, workload B
    holds 8 in 5-minute records from :05. At most 8 GPUs ride the reservation at any moment, the rest is on-demand."""
    res_block = [ReservedBlock("r1", "resv", SKU, 8, 0, 100_000, 2_000_000)]
    recs = [UtilRec("A", "t1", SKU, T0, 3600, 8, 0.5)]
    recs += [UtilRec("B", "t2", SKU, s, 300, 8, 0.5) for s in range(T0 + 300, T0 + 3600, 300)]
    books = build_books(recs, {}, res_block, {SKU: OD}, T0, T0 + 3600, POOLS)
    res = allocate_costs(books.capacity, books.allocations, T0, T0 + 3600)
    assert res.conserved
    reserved_part_s = sum(res.part_s_by_allocation[a.id] for a in books.allocations if a.pool_id == "resv")
    assert reserved_part_s <= 8 * PARTS_PER_GPU * 3600
    assert sum(res.part_s_by_allocation.values()) == (8 * 3600 + 8 * 3300) * PARTS_PER_GPU
