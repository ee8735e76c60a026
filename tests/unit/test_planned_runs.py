"""The planned-run reservation (control/planned_runs.py): when a registered run is due, how many nodes its
expected saving buys, the weighing of its probability and the tiers' ceilings, and the procurer's hook."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.control.planned_runs import (
    PlannedRunReserve,
    TierPrices,
    due_runs,
    expected_saving_usd,
    order_from_s,
    run_scenarios,
)
from gpufleet.control.procurement import ForecastLedProcurer, TierLimits
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.ports import PlannedRunRegistration, ProcurementContext

DAY = 86400
H = 3600
PRICES = TierPrices(reserved=4.0, on_demand=6.9, spot=1.25, secondary=2.95, spot_share=0.3, spot_capacity_gpus=64,
                    secondary_capacity_gpus=64, on_demand_quota_gpus=192)  # fmt: skip


def run(
    start_d: float = 30, gpus: int = 256, days: float = 14, p: float = 1.0, reg_d: float = 0
) -> PlannedRunRegistration:
    return PlannedRunRegistration(
        "pretrain", "foundation", "h100_80gb", gpus, int(start_d * DAY), int(days * DAY), p, int(reg_d * DAY)
    )


def test_a_run_is_due_once_at_the_last_review_whose_order_lands_by_its_start() -> None:
    r = run(start_d=25)
    lead, gap = 7 * DAY, 7 * DAY
    due_days = [d for d in range(0, 40) if due_runs([r], "h100_80gb", d * DAY, lead, gap)]
    # reviews fall on the 7-day grid: the one on day 14 orders for it, and so does a review asked again before the
    # next one (its order rejected: sim/desk.py), never one before day 14
    assert due_days == [14, 15, 16, 17, 18, 19, 20]
    assert [d for d in range(0, 40, 7) if due_runs([r], "h100_80gb", d * DAY, lead, gap)] == [14]
    assert not due_runs([r], "l40s", 14 * DAY, lead, gap)  # another SKU
    assert not due_runs([run(start_d=25, p=0.0)], "h100_80gb", 14 * DAY, lead, gap)


def test_a_late_registration_is_due_at_the_first_review_after_it() -> None:
    r = run(start_d=25, reg_d=20)  # registered 5 days ahead: no order can land by the start
    lead, gap = 7 * DAY, 7 * DAY
    assert not due_runs([r], "h100_80gb", 14 * DAY, lead, gap)  # not registered yet
    assert due_runs([r], "h100_80gb", 21 * DAY, lead, gap)
    assert not due_runs([r], "h100_80gb", 28 * DAY, lead, gap)  # started: the loop knows whether it came


@given(
    reg_h=st.integers(0, 60 * 24), ahead_h=st.integers(1, 90 * 24), lead_d=st.integers(0, 30), gap_d=st.integers(1, 14)
)
def test_order_from_is_when_the_run_becomes_due_for_one_review_gap(
    reg_h: int, ahead_h: int, lead_d: int, gap_d: int
) -> None:
    """``order_from_s`` (what the service reports per run) is when ``due_runs`` starts ordering for the run, at any
    pass time: due from then for one review gap, never after the start; reviews on the grid order once."""
    r = run(start_d=(reg_h + ahead_h) / 24, reg_d=reg_h / 24)
    lead, gap = lead_d * DAY, gap_d * DAY
    at = order_from_s(r, lead, gap)
    for t in range(max(at - 2 * gap, 0), r.start_s + gap, 6 * H):
        assert bool(due_runs([r], "h100_80gb", t, lead, gap)) == (at <= t < min(at + gap, r.start_s)), t
    on_grid = [t for t in range(0, r.start_s + gap, gap) if due_runs([r], "h100_80gb", t, lead, gap)]
    assert on_grid == [t for t in [-(-at // gap) * gap] if t < r.start_s]
    assert PlannedRunReserve(review_gap_h=gap_d * 24).order_from_s(r, lead_d * 24) == at


def test_scenarios_weigh_every_combination() -> None:
    a, b = run(start_d=1, gpus=8, days=1, p=0.7), run(start_d=2, gpus=16, days=1, p=0.5)
    rows, w = run_scenarios([a, b], start_h=0, hours=72)
    assert w.sum() == pytest.approx(1.0)
    assert sorted(w.round(3)) == sorted([0.35, 0.35, 0.15, 0.15])
    both = rows[np.argmax((rows[:, 30] == 8) & (rows[:, 50] == 16))]
    assert both[:24].sum() == 0 and both[24:48].sum() == 8 * 24 and both[48:].sum() == 16 * 24


def test_a_gpu_queued_past_the_ceilings_is_priced_at_the_shortage_price() -> None:
    demand = np.full((1, 10), 400.0)  # above 0 reserved: spot 64 (0.3 x 400 > 64), secondary 64, on demand 192
    w = np.ones(1)
    # level 50 -> over = 350 > 320: short; level 100 -> over 300: on demand; level 300 -> over 100: secondary
    assert expected_saving_usd(demand, w, 50, PRICES, shortage=20.0) == pytest.approx(10 * (20.0 - 4.0))
    assert expected_saving_usd(demand, w, 100, PRICES, shortage=20.0) == pytest.approx(10 * (6.9 - 4.0))
    assert expected_saving_usd(demand, w, 300, PRICES, shortage=20.0) == pytest.approx(10 * (2.95 - 4.0))
    assert expected_saving_usd(demand, w, 500, PRICES, shortage=20.0) == pytest.approx(-40.0)


def _nodes(
    rule: PlannedRunReserve, runs: list[PlannedRunRegistration], base: float | np.ndarray, have: float = 0
) -> int:
    path = np.broadcast_to(np.asarray(base, dtype=np.float64), (91 * 24,))  # an order on day 14 covers days 21..112
    return rule.nodes(runs, sku_id="h100_80gb", now_s=14 * DAY, path=path, have=have, per=8, lead_h=7 * 24,
                      prices=PRICES)[0]  # fmt: skip


def test_nothing_without_a_due_run() -> None:
    rule = PlannedRunReserve(shortage_weight=3.0)
    assert _nodes(rule, [], 300) == 0
    assert _nodes(rule, [run(start_d=60)], 300) == 0  # a later review orders for it


def test_a_run_at_the_ceiling_buys_what_keeps_the_queue_away() -> None:
    """300 GPUs of other demand on 176 reserved (what the forecast-led rule holds: the GPUs on demand would serve
    every hour); the pay-per-use tiers hold 320 more, so a 256-GPU run would queue 60 GPUs. With a dear enough
    queue every queued GPU's node is bought; the rest of the run rides on the pay-per-use tiers."""
    r = run(start_d=25, gpus=256, days=14)
    short = _nodes(PlannedRunReserve(shortage_weight=10.0), [r], 300, have=176)
    assert 60 - 8 <= short * 8 <= 60 + 8
    # at the on-demand price (no extra value of a queue) a two-week run does not pay for a quarter's term
    assert _nodes(PlannedRunReserve(shortage_weight=1.0), [r], 300, have=176) == 0


def test_an_unlikely_run_buys_less_and_more_committed_capacity_buys_less() -> None:
    rule = PlannedRunReserve(shortage_weight=6.0)
    sure = _nodes(rule, [run(start_d=25, p=1.0)], 300, have=176)
    assert sure > 0
    assert _nodes(rule, [run(start_d=25, p=0.05)], 300, have=176) < sure
    assert _nodes(rule, [run(start_d=25, p=1.0)], 300, have=176 + 24) == max(sure - 3, 0)


def test_capacity_used_after_the_run_counts() -> None:
    """The same run, but the other demand grows by 64 GPUs after it (days 50..112 of the term): the reserved
    GPUs then replace on-demand GPUs instead of the cheaper secondary ones, so more of them pay."""
    rule = PlannedRunReserve(shortage_weight=1.0)
    flat = np.full(91 * 24, 300.0)
    grown = flat.copy()
    grown[(50 - 21) * 24 :] += 64
    r = [run(start_d=25, gpus=256, days=14)]
    assert _nodes(rule, r, grown, have=176) > _nodes(rule, r, flat, have=176)


def test_the_procurer_proposes_a_planned_run_reserve_with_its_reason() -> None:
    pool = next(p for p in default_pools("h100_80gb", "us-east-1") if p.tier is Tier.RESERVED)
    hist = np.full(14 * 24, 300.0)
    limits = {"h100_80gb": TierLimits(64, 64, 192)}
    ctx = ProcurementContext(14 * DAY, "h100_80gb", pool, hist, None, 0, 8)
    plain = ForecastLedProcurer(limits).propose(ctx)
    assert all("planned_run_reserve" not in p.reason for p in plain)
    lead_d = pool.lead_time_s / DAY
    registered = ProcurementContext(14 * DAY, "h100_80gb", pool, hist, None, 0, 8,
                                    planned_runs=(run(start_d=14 + lead_d + 1, gpus=256),))  # fmt: skip
    props = ForecastLedProcurer(limits, planned=PlannedRunReserve(shortage_weight=10.0)).propose(registered)
    assert [p.reason for p in props][: len(plain)] == [p.reason for p in plain]
    extra = [p for p in props if p.reason.startswith("planned_run_reserve")]
    assert len(extra) == 1 and extra[0].units > 0 and "pretrain" in extra[0].reason
    assert ForecastLedProcurer(limits, planned=None).propose(registered) == plain
