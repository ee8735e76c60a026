"""Where a SKU is planned (control/proposing.py: ``plan_regions``): reservations are regional, so each region with a
reserved pool where the SKU ran, or where runs are registered, is planned on its own use, and the main region on
the rest; no record is read by two plans (it would be bought twice) and none by no plan (it would be lost)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.control.proposing import PlanRegion, plan_regions

REGIONS = ("ap", "eu", "us", "sa")


def test_a_sku_used_in_one_region_is_planned_there_on_all_its_use() -> None:
    assert plan_regions(True, {"us": 9.0}, ["us", "eu"]) == (PlanRegion("us", "most_used_region"),)
    # records that name no pool: the main region (first with a reserved pool), as before regions were split
    assert plan_regions(True, {}, ["us", "eu"]) == (PlanRegion("eu", "first_reserved_region"),)
    # use in a region without a reserved pool has nowhere else to be planned: the main region reads it
    assert plan_regions(True, {"us": 9.0, "ap": 99.0}, ["us"]) == (PlanRegion("us", "most_used_region"),)


def test_each_region_used_with_a_reserved_pool_is_planned_on_its_own_use() -> None:
    got = plan_regions(True, {"eu": 5.0, "us": 9.0, "ap": 99.0}, ["us", "eu"])
    assert got == (
        PlanRegion("us", "most_used_region", excluded=("eu",)),
        PlanRegion("eu", "used_region", own_only=True),
    )
    main, eu = got
    assert [main.reads(r) for r in ("us", "eu", "ap", None)] == [True, False, True, True]
    assert [eu.reads(r) for r in ("us", "eu", "ap", None)] == [False, True, False, False]


def test_a_region_with_runs_registered_is_planned_from_its_own_use() -> None:
    got = plan_regions(True, {"us": 9.0}, ["us", "eu"], run_regions=["eu", "ap"])
    assert got == (
        PlanRegion("us", "most_used_region", excluded=("eu",)),
        PlanRegion("eu", "planned_runs_region", own_only=True),
    )  # "ap" has no reserved pool: its run cannot be reserved ahead of there


def test_a_sku_not_used_yet_is_planned_only_where_its_runs_are() -> None:
    assert plan_regions(False, {}, ["us", "eu"], {"us": 8}, ["eu"]) == (
        PlanRegion("eu", "planned_runs_region", own_only=True),
    )
    assert plan_regions(False, {}, ["us", "eu"]) == ()
    assert plan_regions(True, {"us": 1.0}, []) == ()  # no reserved pool anywhere


@given(
    used=st.dictionaries(st.sampled_from(REGIONS), st.floats(0, 1e6), max_size=4),
    reserved=st.lists(st.sampled_from(REGIONS), max_size=4),
    held=st.dictionaries(st.sampled_from(REGIONS), st.integers(0, 64), max_size=4),
    runs=st.lists(st.sampled_from(REGIONS), max_size=3),
)
def test_every_record_is_read_by_exactly_one_plan(
    used: dict[str, float], reserved: list[str], held: dict[str, int], runs: list[str]
) -> None:
    plans = plan_regions(True, used, reserved, held, runs)
    if not reserved:
        assert plans == ()
        return
    assert len({p.region for p in plans}) == len(plans) and {p.region for p in plans} <= set(reserved)
    for record_region in (*REGIONS, None, "unknown"):
        assert sum(p.reads(record_region) for p in plans) == 1, (record_region, plans)
    # every reserved region with use or runs is planned, and only the main one reads more than its own records
    assert {r for r in reserved if used.get(r, 0) > 0 or r in runs} <= {p.region for p in plans}
    assert sum(not p.own_only for p in plans) == 1
