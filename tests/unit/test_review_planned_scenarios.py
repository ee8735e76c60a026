"""Review of the planned-run reserve (control/planned_runs.py): how many registered runs it can weigh.

The calendar is written by app_team tokens (service/planned_runs.py: any number of runs, each with a unique name), so
the decision must not grow with 2^(number of runs): one team's 40 uncertain runs must not exhaust the memory of the
procurement pass of the SKU-region."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.planned_runs import PlannedRunReserve, TierPrices, expected_saving_usd, run_scenarios
from gpufleet.ports import PlannedRunRegistration

DAY = 86_400
H = 3600
SKU = "h100_80gb"
PRICES = TierPrices(reserved=4.0, on_demand=6.9, spot=1.25, secondary=2.95, spot_share=0.3, spot_capacity_gpus=64,
                    secondary_capacity_gpus=64, on_demand_quota_gpus=192)  # fmt: skip
NOW_S, LEAD_H, PER = 14 * DAY, 7 * 24, 8


def _run(i: int, start_d: float, gpus: int, days: float, p: float) -> PlannedRunRegistration:
    return PlannedRunRegistration(f"run-{i}", "team-p", SKU, gpus, int(start_d * DAY), int(days * DAY), p, 0)


def _bisect(saving: object, have: float, top: int) -> int:
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi) // 2
        if saving(have + PER * mid + PER / 2) > 0:  # type: ignore[operator]
            lo = mid + 1
        else:
            hi = mid
    return lo


@pytest.mark.timeout(120)
def test_forty_uncertain_runs_are_weighed_exactly_without_enumerating_every_combination() -> None:
    """Review (fixed), the defect: ``run_scenarios`` built a 2^k x term-hours matrix of every combination of the
    k overlapping runs, so 40 registered runs (p = 0.5, 16 GPUs each, all at once) asked numpy for petabytes and the
    procurement pass died with a MemoryError.

    40 identical independent runs are 16 x Binomial(40, 0.5) GPUs in the hours they all run: the decision must buy
    exactly the nodes whose expected saving over that distribution is positive."""
    k, gpus, p = 40, 16, 0.5
    runs = [_run(i, start_d=25, gpus=gpus, days=14, p=p) for i in range(k)]
    hours = 91 * 24  # an order on day 14 covers days 21..112
    path = np.full(hours, 300.0)
    have = 176.0
    got, why = PlannedRunReserve(shortage_weight=10.0).nodes(
        runs, sku_id=SKU, now_s=NOW_S, path=path, have=have, per=PER, lead_h=LEAD_H, prices=PRICES
    )
    # the reference: one row per number of runs going ahead, weighted by the binomial pmf
    pmf = np.array([math.comb(k, j) * p**j * (1 - p) ** (k - j) for j in range(k + 1)])
    a, b = (25 - 21) * 24, (25 + 14 - 21) * 24
    rows = np.tile(path, (k + 1, 1))
    rows[:, a:b] += (gpus * np.arange(k + 1))[:, None]
    shortage = 10.0 * PRICES.on_demand
    top = math.ceil((rows.max() - have) / PER)
    want = _bisect(lambda level: expected_saving_usd(rows, pmf, level, PRICES, shortage), have, top)
    assert want > 0 and got == want, (got, want)
    assert "run-0" in why and "run-39" in why


runs_st = st.lists(
    st.tuples(
        st.floats(21, 120),  # start day (the term covers days 21..112)
        st.sampled_from([8, 16, 24, 64, 100, 256]),
        st.floats(0.5, 30),  # days
        st.sampled_from([0.05, 0.3, 0.5, 0.9, 1.0]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(spec=runs_st, base=st.sampled_from([0.0, 150.0, 300.0]), have=st.sampled_from([0.0, 176.0, 400.0]))
def test_the_decision_equals_the_weighing_of_every_combination(
    spec: list[tuple[float, int, float, float]], base: float, have: float
) -> None:
    """On a few runs the decision is the module docstring's weighing over all 2^k combinations (``run_scenarios``,
    ``expected_saving_usd``), whatever way it computes it. The first run is due at day 14 (starts on day 25)."""
    runs = [_run(0, 25, 64, 14, 1.0)] + [_run(i + 1, s, g, d, p) for i, (s, g, d, p) in enumerate(spec)]
    hours = 91 * 24
    path = np.full(hours, base)
    path[hours // 2 :] += 40.0
    rule = PlannedRunReserve(shortage_weight=10.0)
    got, _ = rule.nodes(runs, sku_id=SKU, now_s=NOW_S, path=path, have=have, per=PER, lead_h=LEAD_H, prices=PRICES)
    start_h = NOW_S / H + LEAD_H
    overlap = [r for r in runs if r.end_s > start_h * H and r.start_s < (start_h + hours) * H]
    extra, w = run_scenarios(overlap, start_h, hours)
    demand = path[None, :] + extra
    shortage = 10.0 * PRICES.on_demand
    top = max(0, math.ceil((float(demand.max()) - have) / PER))
    want = _bisect(lambda level: expected_saving_usd(demand, w, level, PRICES, shortage), have, top)
    assert got == want
