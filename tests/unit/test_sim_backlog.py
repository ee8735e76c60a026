"""The training backlog at the horizon and the same-work cost (sim/backlog.py): by hand, as an invariant, in a run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.sim.backlog import backlog_gpu_s, backlog_price_usd_h
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.kinds import DONE, PARKED, QUEUED, RUNNING
from gpufleet.sim.run import simulate

H = 100 * 3600


def one(
    state: int,
    *,
    work: int = 36_000,
    arrival: int = 0,
    start: int = 0,
    remaining: int = 36_000,
    gpus: int = 8,
    serving: int = -1,
    horizon: int = H,
) -> float:
    return backlog_gpu_s(
        work_s=[work],
        arrival_s=[arrival],
        state=[state],
        start_s=[start],
        remaining_s=[remaining],
        gpus=[gpus],
        serving=[serving],
        sku=[0],
        horizon_s=horizon,
        n_skus=1,
    )[0]


def test_a_job_never_started_owes_its_whole_work_and_a_finished_one_nothing() -> None:
    assert one(QUEUED) == 36_000 * 8
    assert one(PARKED) == 36_000 * 8
    assert one(DONE, remaining=0) == 0.0


def test_a_job_that_arrived_near_the_end_owes_only_what_the_bound_did_by_the_horizon() -> None:
    # arrived 1 h before the end: the bound (run at arrival) did 1 h of its 10 h by the horizon
    assert one(QUEUED, arrival=H - 3600) == 3600 * 8
    # running since its arrival: it did what the bound did, owes nothing
    assert one(RUNNING, arrival=H - 3600, start=H - 3600, remaining=36_000) == 0.0


def test_a_running_job_owes_the_hours_it_started_late() -> None:
    # arrived at 0, started 5 h before the end with all its 10 h of work: 5 h done, the bound did all 10
    assert one(RUNNING, start=H - 5 * 3600, remaining=36_000) == 5 * 3600 * 8


def test_never_arrived_and_serving_pods_are_not_training_demand() -> None:
    assert one(0) == 0.0
    assert one(QUEUED, serving=2) == 0.0


@given(
    work=st.integers(1, 10**6),
    arrival=st.integers(0, H),
    run_from=st.integers(0, H),
    remaining=st.integers(0, 2 * 10**6),
    state=st.sampled_from([QUEUED, RUNNING, PARKED, DONE]),
)
def test_the_backlog_is_never_negative_nor_above_what_the_bound_did(
    work: int, arrival: int, run_from: int, remaining: int, state: int
) -> None:
    got = one(state, work=work, arrival=arrival, start=max(arrival, run_from), remaining=remaining, gpus=1)
    assert 0.0 <= got <= min(work, H - arrival)


def test_the_backlog_price_is_the_lower_of_on_demand_and_what_the_loop_paid_per_gpu_hour_of_work() -> None:
    assert backlog_price_usd_h(6.0, billed_usd=500.0, allocated_gpu_h=100.0) == 5.0
    assert backlog_price_usd_h(4.0, billed_usd=500.0, allocated_gpu_h=100.0) == 4.0
    assert backlog_price_usd_h(None, billed_usd=500.0, allocated_gpu_h=100.0) == 5.0
    assert backlog_price_usd_h(6.0, billed_usd=0.0, allocated_gpu_h=0.0) == 6.0
    assert backlog_price_usd_h(None, billed_usd=0.0, allocated_gpu_h=0.0) == 0.0


def test_a_run_reports_its_backlog_and_the_same_work_cost_adds_it_to_the_bill() -> None:
    _, s = simulate(steady_scenario(gpus=64, days=3), seed=2)
    assert s["backlog_gpu_hours"] >= 0.0
    assert set(s["backlog_by_sku"]) == set(s["series"]["sku_ids"])
    assert abs(s["work_equal_cost_usd"] - s["total_cost_usd"] - s["backlog_usd"]) < 0.02
    for b in s["backlog_by_sku"].values():
        assert abs(b["usd"] - b["gpu_hours"] * b["usd_per_gpu_h"]) < 0.01 * max(1.0, b["usd"])
