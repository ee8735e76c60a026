"""Review: budget admission over every window a run reaches (control/admission.py ``decide_budget``)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.admission import (
    MAX_BUDGET_WINDOWS,
    AdmissionAction,
    PricedOption,
    budget_windows,
    decide_budget,
    expected_units,
    run_end_s,
    team_budget,
)
from gpufleet.domain.money import LEDGER_UNITS_PER_USD

NOW_S = 1_767_225_600  # 2026-01-01T00:00Z
H = 3600

options = st.builds(
    PricedOption,
    name=st.just(""),
    price_uusd_per_gpu_h=st.integers(0, 20_000_000),
    gpus=st.integers(1, 64),
    pool_id=st.just("p"),
)


@settings(max_examples=400, deadline=None)
@given(
    period=st.sampled_from(["day", "week", "month"]),
    now_s=st.integers(NOW_S, NOW_S + 400 * 86_400),
    limit_cents=st.integers(0, 2_000_000),
    spent_cents=st.integers(0, 2_000_000),
    run_s=st.one_of(st.just(0), st.integers(1, 90 * 86_400)),
    opts=st.lists(options, min_size=1, max_size=4),
    committed_cents=st.lists(st.integers(0, 2_000_000), min_size=MAX_BUDGET_WINDOWS, max_size=MAX_BUDGET_WINDOWS),
)
def test_an_option_is_admitted_only_if_it_fits_every_window_its_run_touches(
    period: str,
    now_s: int,
    limit_cents: int,
    spent_cents: int,
    run_s: int,
    opts: list[PricedOption],
    committed_cents: list[int],
) -> None:
    """Review (fixed), the defect: ``decide_budget`` checked an option only over the part of its run inside the
    current window, so a run crossing midnight (a week's or a month's end) spent the next window's budget unchecked.
    Here: admitted (preferred, else the first degrade option that fits) only if it fits in every window it touches
    given the committed spend there; queued otherwise, until the first window refusing the preferred option ends."""
    budget = team_budget("t", limit_cents=limit_cents, period=period, alert_at=(1.0,), enforce=True, now_s=now_s)
    cent = LEDGER_UNITS_PER_USD // 100
    opts = [PricedOption("requested" if i == 0 else f"degrade_options[{i - 1}]", o.price_uusd_per_gpu_h, o.gpus, "p")
            for i, o in enumerate(opts)]  # fmt: skip
    end_s = run_end_s(budget, run_s, now_s)
    windows = budget_windows(period, now_s, end_s)
    assert windows[0] == (budget.window_start_s, budget.window_end_s) and len(windows) <= MAX_BUDGET_WINDOWS
    assert all(a[1] == b[0] for a, b in itertools.pairwise(windows))  # consecutive, tiling time
    spent = {w: c * cent for w, c in zip(windows, [spent_cents, *committed_cents], strict=False)}
    later = {w: spent[w] for w in windows[1:]}
    call = decide_budget(budget, spent[windows[0]], opts[0], opts[1:], expected_run_s=run_s, workload_id="w",
                         now_s=now_s, later=later)  # fmt: skip

    def refusing(o: PricedOption) -> list[tuple[int, int]]:
        rate = o.price_uusd_per_gpu_h * o.gpus
        return [w for w in windows if spent[w] + expected_units(rate, now_s, end_s, w) > budget.limit_amount]

    fits = [o for o in opts if not refusing(o)]
    if call.chosen is None:
        assert call.decision.action is AdmissionAction.QUEUE and not fits
        assert call.decision.retry_at_s == refusing(opts[0])[0][1]
    else:
        assert not refusing(call.chosen), "admitted an option that overruns a window its run touches"
        assert call.chosen == fits[0]  # the preferred option if it fits, else the first degrade option that does
        assert call.decision.action is (AdmissionAction.ADMIT if call.chosen is opts[0] else AdmissionAction.DEGRADE)
        rate = call.chosen.price_uusd_per_gpu_h * call.chosen.gpus
        assert call.admitted_units == expected_units(rate, now_s, end_s, windows[0])  # the current window's part
    assert call.end_s == end_s


def test_a_run_crossing_midnight_is_refused_by_the_next_days_commitments_and_fits_without_them() -> None:
    """The example of the review: a 100 $ day budget at 23:00; 1 GPU at 6.88 $/h for 10 h spends 6.88 $ today and
    61.92 $ tomorrow. With 50 $ already committed tomorrow it does not fit there (queued until tomorrow ends); a
    run of 0 s (until today ends) is checked in today only."""
    now_s = NOW_S + 23 * H
    budget = team_budget("t", limit_cents=10_000, period="day", alert_at=(1.0,), enforce=True, now_s=now_s)
    tomorrow = (NOW_S + 86_400, NOW_S + 2 * 86_400)
    one = PricedOption("requested", 6_880_000, 1, "p")
    fits = decide_budget(budget, 0, one, [], expected_run_s=10 * H, workload_id="w", now_s=now_s,
                         later={tomorrow: 0})  # fmt: skip
    assert fits.decision.action is AdmissionAction.ADMIT and fits.end_s == now_s + 10 * H
    full = {tomorrow: 50 * LEDGER_UNITS_PER_USD}  # 50 $
    refused = decide_budget(budget, 0, one, [], expected_run_s=10 * H, workload_id="w", now_s=now_s, later=full)
    assert refused.decision.action is AdmissionAction.QUEUE and refused.decision.retry_at_s == tomorrow[1]
    assert refused.decision.budget_id == budget.id
    short = decide_budget(budget, 0, one, [], expected_run_s=0, workload_id="w", now_s=now_s, later=full)
    assert short.decision.action is AdmissionAction.ADMIT and short.end_s == tomorrow[0]
    assert len(budget_windows("day", now_s, now_s + 365 * 86_400)) == MAX_BUDGET_WINDOWS  # a year: the cap
