"""Review of the dashboard's data (``web/data.py`` over ``control.metering.Meter.window``): the numbers the pages
show must add up to the books' numbers, and an app team sees no fleet-wide figure."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.metering import Meter, MeterInputs, ReservedBlock, UtilRec, WorkloadInfo
from gpufleet.cost.idle import IdleAction, IdleFinding
from gpufleet.cost.rightsizing import Recommendation, ResourceSpec
from gpufleet.domain.pools import Tier
from gpufleet.web.data import CostDashboardData, Scope

DAY = 86_400
T1 = 1_767_225_600
T0 = T1 - 7 * DAY
SKU = "h100_80gb"
OD_POOL, RES_POOL = "aws/us-east-1/h100_80gb/on_demand", "aws/us-east-1/h100_80gb/reserved"
OD_UUSD, RES_UUSD = 2_000_000, 1_000_000
POOLS = {OD_POOL: (Tier.ON_DEMAND, OD_UUSD), RES_POOL: (Tier.RESERVED, RES_UUSD)}
USD = 3_600_000_000  # ledger units in a dollar (micro-dollars per GPU-hour x GPU-seconds)
MAX_ROWS = 500  # rows of a list the dashboard's JSON carries at most (web/data.py)
WLS = {
    "wa": WorkloadInfo("wa", "team-a", "team-a-prod", "training", "wa"),
    "wb": WorkloadInfo("wb", "team-b", "team-b-prod", "training", "wb"),
}


def _data(recs: list[UtilRec], reservations: list[ReservedBlock] | None = None) -> CostDashboardData:
    ld = MeterInputs(recs, WLS, {}, {}, reservations or [], {SKU: (OD_POOL, OD_UUSD)}, POOLS)
    return CostDashboardData(Meter().window(ld, T0, T1))


def _steady(wl: str, team: str, gpus: float, bucket_s: int, start_s: int = T0 - DAY) -> list[UtilRec]:
    return [UtilRec(wl, team, SKU, s, bucket_s, gpus, 0.5) for s in range(start_s, T1, bucket_s)]


@settings(max_examples=40, deadline=None)
@given(bucket_s=st.sampled_from([300, 900, 3600, 5400, 7200, 4 * 3600, 86_400]), gpus=st.integers(1, 64))
def test_forecast_shows_the_gpus_held_each_hour_whatever_the_bucket_length(bucket_s: int, gpus: int) -> None:
    """Review (fixed), the defect: ``control/metering.py:_forecast`` put a record's GPU-hours all in the hour its
    bucket starts, so telemetry in buckets longer than an hour (2 h, a day: ingest takes up to 86,400 s) showed
    "GPUs held" as 2x, 0, 2x, 0 ... or 24x then 23 zeros on the forecast page, for a fleet holding the same GPUs
    throughout."""
    f = _data(_steady("wa", "team-a", float(gpus), bucket_s)).forecast(Scope(None))
    assert f["series"] is not None
    assert f["series"]["actual_gpus"] == pytest.approx([gpus] * len(f["series"]["t_s"]))
    assert f["series"]["forecast_gpus"] == pytest.approx([gpus] * len(f["series"]["t_s"]))
    assert f["mape"] == pytest.approx(0.0)


def _two_reservations_and_an_expired_one() -> list[ReservedBlock]:
    return [
        ReservedBlock("r-old", RES_POOL, SKU, 8, T0 - 400 * DAY, T0 - 35 * DAY, RES_UUSD),  # over before the window
        ReservedBlock("r-a", RES_POOL, SKU, 8, T0 - 10 * DAY, T0 + 20 * DAY, RES_UUSD),
        ReservedBlock("r-b", RES_POOL, SKU, 4, T0 - 10 * DAY, T0 + 50 * DAY, RES_UUSD),
    ]


def test_reservation_rows_split_their_pools_idle_cost_instead_of_repeating_it() -> None:
    """Review (fixed), the defect: ``web/data.py:reservations`` gave every reservation of a pool the whole pool's
    idle cost (three reservations in one pool: three times the pool's idle, against the overview's idle once),
    and listed a reservation that ended a month before the window with the pool's utilization and idle cost
    though it cost nothing in the window."""
    d = _data(_steady("wa", "team-a", 3.0, 3600), _two_reservations_and_an_expired_one())
    ov = d.overview(Scope(None))
    resv = d.reservations(Scope(None))
    assert [r["id"] for r in resv["rows"]] == ["r-a", "r-b"]  # r-old cost nothing in the window
    reserved_idle = sum(p["usd"] for p in ov["idle_by_pool"] if p["pool"] == RES_POOL)
    assert reserved_idle == pytest.approx(12 * 168 * 1.0 - 3 * 168 * 1.0)
    assert sum(r["idle_usd"] for r in resv["rows"]) == pytest.approx(reserved_idle, abs=0.005)
    assert sum(r["window_cost_usd"] for r in resv["rows"]) == pytest.approx(ov["kpis"]["cost_usd"])
    by_id = {r["id"]: r for r in resv["rows"]}
    assert by_id["r-a"]["idle_usd"] == pytest.approx(2 * by_id["r-b"]["idle_usd"], abs=0.01)  # 8 GPUs vs 4


def test_a_future_reservation_is_listed_without_a_utilization_it_cannot_have() -> None:
    """Review (fixed), the defect: a paid reservation that starts after the window (bought ahead) was shown with
    its pool's utilization and its pool's idle cost, though it held nothing and cost nothing in the window."""
    res = [*_two_reservations_and_an_expired_one(), ReservedBlock("r-next", RES_POOL, SKU, 8, T1 + DAY, T1 + 31 * DAY,
                                                                  RES_UUSD)]  # fmt: skip
    rows = {r["id"]: r for r in _data(_steady("wa", "team-a", 3.0, 3600), res).reservations(Scope(None))["rows"]}
    assert rows["r-next"]["window_cost_usd"] == 0.0 and rows["r-next"]["idle_usd"] == 0.0
    assert rows["r-next"]["utilization"] is None
    assert rows["r-next"]["days_to_expiry"] == pytest.approx(31.0)


def test_an_app_team_overview_carries_no_fleet_capacity() -> None:
    """Review (fixed), the defect: ``web/data.py:overview`` sent an app team its team's daily series with
    ``capacity_gpu_h`` = the whole fleet's reserved GPU-hours per day (the page hides it, the JSON carried it),
    fleet-wide figures the API refuses an app team (``/v1/fleet/utilization`` is a 403, reservations' coverage
    is null for a team)."""
    d = _data(_steady("wa", "team-a", 3.0, 3600) + _steady("wb", "team-b", 2.0, 3600),
              _two_reservations_and_an_expired_one())  # fmt: skip
    fleet = d.overview(Scope(None))["daily"]
    assert fleet["capacity_gpu_h"] == pytest.approx([12 * 24.0] * 7)
    mine = d.overview(Scope("team-a"))["daily"]
    assert mine["allocated_gpu_h"] == pytest.approx([3 * 24.0] * 7)
    assert mine["capacity_gpu_h"] is None


def test_a_huge_fleet_gives_bounded_pages_whose_totals_still_cover_everything() -> None:
    """Review (fixed), the defect: ``web/data.py:opportunities`` and ``breakdown`` returned every idle finding,
    every rightsizing change and every label value (by feature: one row per workload name) and the page drew a
    table row for each, so a fleet of tens of thousands of workloads made megabytes of JSON and a page a browser
    chokes on; the page's totals were summed in the browser from those rows. Now the JSON carries the largest
    rows up to a cap, plus the count and total of all of them (the CSV export keeps every row)."""
    n = 3 * MAX_ROWS
    wls = {f"w{i:05d}": WorkloadInfo(f"w{i:05d}", "team-a", "team-a-prod", "training", f"feat-{i:05d}")
           for i in range(n)}  # fmt: skip
    recs = [
        UtilRec(w, "team-a", SKU, s, DAY, 1.0 + (i % 7), 0.5) for i, w in enumerate(wls) for s in range(T0, T1, DAY)
    ]
    ld = MeterInputs(recs, wls, {}, {}, [], {SKU: (OD_POOL, OD_UUSD)}, POOLS)
    snap = Meter().window(ld, T0, T1)
    idle = [IdleFinding(f"a{i}", w, "team-a", T1 - 7200, 7200, 2.0, 0.01, (i + 1) * USD, IdleAction.NOTIFY,
                        "idle") for i, w in enumerate(wls)]  # fmt: skip
    spec, small = ResourceSpec(16.0, 128.0, 8, SKU), ResourceSpec(8.0, 64.0, 4, SKU)
    rights = [Recommendation(w, 1, spec, small, ("overprovisioned",), Decimal("20.00"), Decimal("10.00") - Decimal(i % 5))
              for i, w in enumerate(wls)]  # fmt: skip
    d = CostDashboardData(dataclasses.replace(snap, idle=idle, recommendations=rights))
    opp = d.opportunities(Scope(None))
    assert len(opp["idle"]) == MAX_ROWS and len(opp["rightsizing"]) == MAX_ROWS
    assert opp["idle_total"]["count"] == n
    assert opp["idle_total"]["wasted_usd"] == pytest.approx(sum(f.wasted_units for f in idle) / USD)
    assert opp["rightsizing_total"]["count"] == n
    assert opp["rightsizing_total"]["monthly_saving_usd"] == pytest.approx(sum(float(r.monthly_saving_usd)
                                                                               for r in rights))  # fmt: skip
    wastes = sorted((f.wasted_units / USD for f in idle), reverse=True)
    assert sorted((f["wasted_usd"] for f in opp["idle"]), reverse=True) == pytest.approx(wastes[:MAX_ROWS])
    savings = sorted((float(r.monthly_saving_usd) for r in rights), reverse=True)
    assert sorted((r["monthly_saving_usd"] for r in opp["rightsizing"]), reverse=True) == savings[:MAX_ROWS]
    br = d.breakdown("feature", Scope(None))
    assert len(br["rows"]) == MAX_ROWS and br["rows_total"] == n
    ov = d.overview(Scope(None))
    assert br["rows"][0]["total_usd"] >= br["rows"][-1]["total_usd"]
    assert sum(r["total_usd"] for r in br["rows"]) <= ov["kpis"]["cost_usd"]
    assert len(d.breakdown_csv("feature", Scope(None)).splitlines()) == n + 2  # header, every row, TOTAL
    assert len(json.dumps(opp)) < 1_000_000
