"""Review: hours at the boundaries of a window, a budget period and a bucket."""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from gpufleet.cost.model import PARTS_PER_GPU
from gpufleet.service.budgets import PricedOption
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, DAY, OD_POOL, H, rec, services, team

NOW = NOW_S + 10 * DAY  # 2026-01-11T00:00:00Z


def _held_gpu_h(snap: object, workload: str | None = None) -> float:
    res = snap.result  # type: ignore[attr-defined]
    ids = [a.id for a in snap.allocations if workload is None or a.workload_id == workload]  # type: ignore[attr-defined]
    return sum(res.part_s_by_allocation.get(i, 0) for i in ids) / PARTS_PER_GPU / H


def test_a_window_starting_mid_hour_counts_the_part_of_the_first_hour_inside_it(database: Database) -> None:
    """Defect: ``control/metering.py`` ``Meter.window`` drops every record that starts before the window
    (``in_window = [r for r in ld.recs if r.start_s >= t0_s]``), so ``build_books``' clipping of the first bucket
    to [t0, t1) never applies. A 24 h window read at 10:30 loses the half hour 10:30-11:00 of yesterday: a
    workload holding 1 GPU every hour shows 23 GPU-hours (and 23 x price) where 23.5 were held inside the window
    (the hour 10:00-11:00 today is not yet ingested). Windows that tile time lose that part every time."""
    now = NOW + 10 * H + 1800  # 10:30
    svc, _clock, finops = services(database, now)
    team(svc, "t1")
    last_hour = now // H * H  # 10:00: the last complete hour ends here
    svc.ingest.ingest(ADMIN, [rec("k8s", last_hour - (h + 1) * H, H, "ns:steady", "t1", 1.0) for h in range(48)])
    snap = finops.snapshot(DAY)
    assert snap.result.conserved
    assert _held_gpu_h(snap) == 23.5  # [yesterday 10:30, today 10:00)


def test_mixed_bucket_sizes_bill_each_workload_only_its_own_bucket(database: Database) -> None:
    """Defect: ``cost/books.py`` ``build_books`` groups the records of a SKU by bucket start and gives every record
    of the group the LONGEST bucket of the group (``s1 = ... start + max(r.bucket_s for r in rows)``). A workload
    metered in 5-minute buckets (a DCGM pipeline) that shares a bucket start with a workload metered hourly (the
    Kubernetes meter) is billed its first 5-minute record as a whole hour, on top of the 11 records after it:
    1.92 GPU-hours (and 13.19 $) for one GPU held one hour."""
    svc, _clock, finops = services(database, NOW)
    team(svc, "t1")
    t = NOW - 2 * H
    recs = [rec("k8s:c1:us-east-1:h100_80gb:on_demand", t, H, "ns:hourly", "t1", 1.0)]
    recs += [rec("dcgm", t + i * 300, 300, "ns:five-min", "t1", 1.0) for i in range(12)]
    svc.ingest.ingest(ADMIN, recs)
    snap = finops.snapshot(DAY)
    assert _held_gpu_h(snap, "ns:hourly") == 1.0
    assert _held_gpu_h(snap, "ns:five-min") == 1.0, "the 5-minute workload is billed more than it held"


def test_a_day_budget_checks_the_spend_a_job_submitted_before_midnight_makes_after_it(database: Database) -> None:
    """Review (fixed), the defect: admission priced a request only over the part of its run inside the CURRENT
    window (``control/admission.py`` ``decide_budget`` -> ``expected_units(..., window)``), but booked the
    commitment to its full end (``service/budgets.py`` ``_decide``: ``end_s=call.end_s``). With a 100 $ daily
    budget, 8 GPUs for 10 h (550.40 $) submitted at 23:00 was checked for its one hour today (55.04 $) and admitted;
    at 00:00 the next day's window opened with 495.36 $ committed against its 100 $: a silent 5x overrun. Now each
    window the run reaches is checked (here the next day refuses: queued until that day ends)."""
    svc, clock, _finops = services(database, NOW - H)  # 2026-01-10T23:00Z
    team(svc, "t1")
    svc.budgets.set(ADMIN, "t1", limit_usd=Decimal(100), period="day", enforce=True)
    out = svc.budgets.admit_placement(
        ADMIN, "t1", preferred=PricedOption("requested", 6_880_000, 8, OD_POOL), degrade=[],
        expected_run_s=10 * H, context={},
    )  # fmt: skip
    assert out is not None
    assert (out.action.value, out.body["retry_at_s"]) == ("queue", NOW + DAY)
    clock.set(NOW)  # midnight: the next day's window
    st = svc.budgets.status(ADMIN, "t1")
    assert st["spent_usd"] <= st["limit_usd"], (
        f"admitted at 23:00 ({out.action.value}), and the next day starts {st['spent_usd']} $ into a "
        f"{st['limit_usd']} $ budget"
    )


def test_procurement_history_spreads_a_long_bucket_over_the_hours_it_covers(database: Database) -> None:
    """Defect: the hourly history the procurer plans from (``service/utilization_reads.py``
    ``gpu_seconds_statement(HOUR_S)`` groups by ``bucket_start_s // 3600``; ``service/late_hours.py``
    ``hourly_gpus``) puts ALL of a record's GPU-seconds in the hour its bucket starts. Ingest accepts buckets up
    to a day; a steady 10 GPUs reported in daily buckets reads as 240 GPUs at midnight and 0 the other 23 hours,
    a peak 24x the real use for the procurer to buy for."""
    svc, _clock, _finops = services(database, NOW + 5 * H)
    team(svc, "t1")
    svc.ingest.ingest(ADMIN, [rec("billing-export", NOW - d * DAY, DAY, "ns:steady", "t1", 10.0, util=None)
                              for d in range(14, 0, -1)])  # fmt: skip
    pr = svc.procurement
    ctx, _held = pr.context("h100_80gb", "us-east-1", pr.loop(["h100_80gb"]), forecast_h=24)
    hourly = np.asarray(ctx.demand_history_gpus)
    assert hourly.size == 14 * 24
    assert float(hourly.mean()) == 10.0
    assert float(hourly.max()) == 10.0, f"hourly demand {hourly[:3].tolist()}...: one hour holds the whole day"
