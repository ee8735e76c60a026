"""The pools' past prices (``cost/prices.py``) and the books charging each hour at the price of its moment."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.cost.books import UtilRec, build_books
from gpufleet.cost.model import PARTS_PER_GPU, CapacityBlock
from gpufleet.cost.prices import PriceHistory
from gpufleet.domain.pools import Tier

H = 3600
OD_A, OD_B, SPOT = "a/od", "b/od", "a/spot"
POOLS = [(OD_A, Tier.ON_DEMAND, "h100", 4_000_000), (OD_B, Tier.ON_DEMAND, "h100", 5_000_000),
         (SPOT, Tier.SPOT, "h100", 2_000_000)]  # fmt: skip


def _charged(books_capacity: list[CapacityBlock], t0: int, t1: int) -> int:
    """uUSD x seconds / hour summed over the pay-per-use blocks (what the books charge, before rounding)."""
    return sum(b.gpus * b.price_uusd_per_gpu_h * (min(b.end_s, t1) - max(b.start_s, t0)) for b in books_capacity)


def test_a_pool_charges_each_price_over_its_own_era() -> None:
    h = PriceHistory.build(POOLS, [(OD_A, 10 * H, 1_000_000), (OD_A, 20 * H, 3_000_000)])
    assert [h.at(OD_A, t) for t in (0, 10 * H - 1, 10 * H, 20 * H - 1, 20 * H, 10**9)] == [
        1_000_000, 1_000_000, 3_000_000, 3_000_000, 4_000_000, 4_000_000]  # fmt: skip
    assert h.at(OD_B, 0) == 5_000_000 and h.at("nope", 0) is None
    assert list(h.cuts("h100", 0, 30 * H)) == [10 * H, 20 * H]
    assert list(h.cuts("h100", 10 * H, 20 * H)) == []  # open interval
    assert list(h.cuts("a100", 0, 30 * H)) == []


def test_the_cheapest_on_demand_pool_is_the_cheapest_at_that_moment() -> None:
    # b was cheaper than a until hour 5 (a was 6 $ then, b always 5 $)
    h = PriceHistory.build(POOLS, [(OD_A, 5 * H, 6_000_000)])
    assert h.cheapest_on_demand("h100", 0) == (OD_B, 5_000_000)
    assert h.cheapest_on_demand("h100", 5 * H) == (OD_A, 4_000_000)
    assert h.cheapest_on_demand("a100", 0) is None


def test_a_bucket_spanning_a_price_change_is_split_at_it() -> None:
    """8 GPUs in the spot pool for one 2-hour bucket; the price rose from 1 $ to 2 $ half-way through."""
    h = PriceHistory.build(POOLS, [(SPOT, H, 1_000_000)])
    rec = UtilRec("w", "t", "h100", 0, 2 * H, 8.0, 0.5, SPOT)
    pools = {p: (tier, price) for p, tier, _s, price in POOLS}
    books = build_books([rec], {}, [], {"h100": (OD_A, 4_000_000)}, 0, 2 * H, pools, h)
    assert sorted((b.start_s, b.end_s, b.price_uusd_per_gpu_h) for b in books.capacity) == [
        (0, H, 1_000_000), (H, 2 * H, 2_000_000)]  # fmt: skip
    assert sum(a.parts for a in books.allocations) == 2 * 8 * PARTS_PER_GPU
    without = build_books([rec], {}, [], {"h100": (OD_A, 4_000_000)}, 0, 2 * H, pools)
    assert [(b.start_s, b.end_s, b.price_uusd_per_gpu_h) for b in without.capacity] == [(0, 2 * H, 2_000_000)]


@given(
    changes=st.lists(st.tuples(st.sampled_from([OD_A, OD_B, SPOT]), st.integers(1, 12 * H - 1),
                               st.integers(1, 9_000_000)), max_size=6),
    recs=st.lists(st.tuples(st.integers(0, 11), st.sampled_from([H, 2 * H, 1800]), st.integers(1, 8),
                            st.sampled_from([OD_A, OD_B, SPOT, None])), min_size=1, max_size=8),
)  # fmt: skip
def test_the_books_charge_every_second_at_the_price_of_its_moment(
    changes: list[tuple[str, int, int]], recs: list[tuple[int, int, int, str | None]]
) -> None:
    """Invariant: the books' pay-per-use charge equals, second by second, the GPUs held times the price then (a
    record naming a pool: that pool's; naming none: the cheapest on-demand pool's)."""
    unique = {(p, u): pr for p, u, pr in changes}  # one price per (pool, instant), as the store keeps it
    h = PriceHistory.build(POOLS, [(p, u, pr) for (p, u), pr in unique.items()])
    rows = [UtilRec(f"w{i}", "t", "h100", hour * H, length, float(g), 0.5, pool)
            for i, (hour, length, g, pool) in enumerate(recs)]  # fmt: skip
    pools = {p: (tier, price) for p, tier, _s, price in POOLS}
    t0, t1 = 0, 13 * H
    books = build_books(rows, {}, [], {"h100": (OD_A, 4_000_000)}, t0, t1, pools, h)
    expected = 0
    edges = sorted(
        {t0, t1, *(u for _p, u in unique), *(r.start_s for r in rows), *(r.start_s + r.bucket_s for r in rows)}
    )
    for a, b in itertools.pairwise(edges):
        for r in rows:
            if r.start_s <= a and b <= r.start_s + r.bucket_s:
                cheapest = h.cheapest_on_demand("h100", a)
                assert cheapest is not None
                price = h.at(r.pool_id, a) if r.pool_id is not None else cheapest[1]
                expected += int(r.gpus) * int(price or 0) * (b - a)
    assert _charged(books.capacity, t0, t1) == expected
