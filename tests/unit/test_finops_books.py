"""The service's books: utilization rides reservations first, the rest is on-demand paid in whole GPUs, and the
cost package's books always balance (direct + idle == fleet)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.books import ReservedBlock, UtilRec, WorkloadInfo, build_books
from gpufleet.cost.model import LineKind

T0 = 1_767_225_600
RES_UUSD = 4_361_900
OD_UUSD = 6_880_000
OD = {"h100_80gb": ("aws/us-east-1/h100_80gb/on_demand", OD_UUSD)}
WLS = {w: WorkloadInfo(w, f"team-{w}", f"tenant-{w}", "training", f"feat-{w}") for w in ("a", "b", "c")}


def _res(units: int) -> list[ReservedBlock]:
    return [ReservedBlock("res_1", "aws/us-east-1/h100_80gb/reserved", "h100_80gb", units, T0 - 86_400, T0 + 86_400,
                          RES_UUSD)]  # fmt: skip


def test_overflow_goes_on_demand_in_whole_gpus_and_unused_reservation_is_idle() -> None:
    recs = [
        UtilRec("a", "team-a", "h100_80gb", T0, 3600, 1.5, 0.5),
        UtilRec("b", "team-b", "h100_80gb", T0, 3600, 1.25, 1.0),
    ]
    books = build_books(recs, WLS, _res(2), OD, T0, T0 + 3600)
    res = allocate_costs(books.capacity, books.allocations, T0, T0 + 3600)
    # a: 1.5 GPU reserved; b: 0.5 reserved + 0.75 on-demand, which pays a whole GPU (0.25 idle on-demand)
    assert [(a.workload_id, a.parts, a.pool_id.rsplit("/", 1)[1]) for a in books.allocations] == [
        ("a", 1260, "reserved"),
        ("b", 420, "reserved"),
        ("b", 630, "on_demand"),
    ]
    assert res.fleet_units == (2 * RES_UUSD + 1 * OD_UUSD) * 3600
    assert res.idle_units == OD_UUSD * 3600 // 4
    assert res.direct_units + res.idle_units == res.fleet_units
    b_cost = sum(ln.units for ln in res.lines if ln.workload_id == "b" and ln.kind is LineKind.DIRECT)
    assert b_cost == RES_UUSD * 3600 // 2 + OD_UUSD * 3600 * 3 // 4
    assert list(books.usage.used_gpu_s) == [1.5 * 0.5 * 3600, 0.5 * 3600, 0.75 * 3600]


def test_a_partly_used_reservation_leaves_its_unused_part_idle() -> None:
    recs = [UtilRec("a", "team-a", "h100_80gb", T0 + h * 3600, 3600, 3.0, 0.4) for h in range(24)]
    b = build_books(recs, WLS, _res(4), OD, T0, T0 + 86_400)
    res = allocate_costs(b.capacity, b.allocations, T0, T0 + 86_400)
    assert res.fleet_units == 4 * RES_UUSD * 86_400 and res.idle_units == RES_UUSD * 86_400
    assert len(b.allocations) == 1 and b.usage.samples[0] == 24  # 24 steady buckets merge into one span
    assert b.usage.used_gpu_s[0] == pytest.approx(3 * 0.4 * 86_400)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 16),
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 23), st.integers(1, 64), st.floats(0, 1)), max_size=40),
)
def test_books_always_balance(units: int, rows: list[tuple[str, int, int, float]]) -> None:
    one_per_bucket = {(w, h): (g, u) for w, h, g, u in rows}  # one record per (workload, bucket), as stored
    recs = [UtilRec(w, f"team-{w}", "h100_80gb", T0 + h * 3600, 3600, g / 8, u)
            for (w, h), (g, u) in one_per_bucket.items()]  # fmt: skip
    b = build_books(recs, WLS, _res(units), OD, T0, T0 + 86_400)
    res = allocate_costs(b.capacity, b.allocations, T0, T0 + 86_400)
    assert res.direct_units + res.idle_units == res.fleet_units == sum(ln.units for ln in res.lines)
    held = sum(a.parts for a in b.allocations if a.start_s == T0)
    assert held == sum(round(r.gpus * 840) for r in recs if r.start_s == T0)
