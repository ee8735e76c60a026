"""Budgets: alerts at thresholds and projections; enforcement queues or degrades, never drops."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.cost.budgets import (
    AdmissionAction,
    AdmissionRequest,
    Budget,
    BudgetUnit,
    CostOption,
    Spend,
    admit,
    evaluate_budget,
)
from gpufleet.domain.money import LEDGER_UNITS_PER_USD

DAY = 86_400


def usd(x: int) -> int:
    return x * LEDGER_UNITS_PER_USD


BUDGET = Budget("b-search", "team", "search", BudgetUnit.USD, Decimal("1000"), 0, 30 * DAY, enforce=True)


def test_alerts_fire_at_thresholds_and_on_projection() -> None:
    st = evaluate_budget(BUDGET, Spend(units=usd(850)), now_s=15 * DAY)
    reasons = [(a.reason, a.threshold) for a in st.alerts]
    assert ("threshold_crossed", 0.5) in reasons and ("threshold_crossed", 0.8) in reasons
    assert ("projected_over_budget", 1.0) in reasons  # 850 in half the window -> 1700 projected
    assert all(a.reason != "budget_exceeded" for a in st.alerts)
    over = evaluate_budget(BUDGET, Spend(units=usd(1001)), now_s=20 * DAY)
    assert any(a.reason == "budget_exceeded" and a.level == "critical" for a in over.alerts)


def test_gpu_hour_budgets_count_gpu_hours() -> None:
    b = Budget("b-gh", "tenant", "t1", BudgetUnit.GPU_H, Decimal("100"), 0, DAY, alert_at=(1.0,))
    assert evaluate_budget(b, Spend(gpu_h=99.0), DAY // 2).fraction == 0.99
    assert evaluate_budget(b, Spend(gpu_h=101.0), DAY // 2).alerts[0].reason == "budget_exceeded"


def test_enforcement_queues_or_degrades_and_never_drops_work() -> None:
    reqs = [
        AdmissionRequest("job-1", {"team": "search"}, CostOption("8xh100", Spend(usd(600), 80.0))),
        AdmissionRequest(
            "job-2",
            {"team": "search"},
            CostOption("8xh100", Spend(usd(600), 80.0)),
            (CostOption("4xh100", Spend(usd(300), 40.0)),),
        ),
        AdmissionRequest("job-3", {"team": "search"}, CostOption("8xh100", Spend(usd(600), 80.0))),
        AdmissionRequest("job-4", {"team": "ads"}, CostOption("8xh100", Spend(usd(600), 80.0))),
    ]
    decisions = admit(reqs, [BUDGET], {"b-search": Spend(usd(50))}, now_s=DAY)
    assert [d.workload_id for d in decisions] == ["job-1", "job-2", "job-3", "job-4"]  # one decision each
    by_id = {d.workload_id: d for d in decisions}
    assert by_id["job-1"].action is AdmissionAction.ADMIT
    assert (by_id["job-2"].action, by_id["job-2"].option) == (AdmissionAction.DEGRADE, "4xh100")
    assert by_id["job-3"].action is AdmissionAction.QUEUE
    assert by_id["job-3"].reason == "over_budget_queued" and by_id["job-3"].budget_id == "b-search"
    assert by_id["job-3"].retry_at_s == 30 * DAY
    assert by_id["job-4"].action is AdmissionAction.ADMIT  # another team's budget is not this one
    assert {d.action for d in decisions} <= set(AdmissionAction)


def test_unenforced_budget_only_alerts() -> None:
    soft = Budget("soft", "team", "search", BudgetUnit.USD, Decimal("1"), 0, DAY)
    (d,) = admit([AdmissionRequest("j", {"team": "search"}, CostOption("x", Spend(usd(5))))], [soft], {}, 10)
    assert d.action is AdmissionAction.ADMIT
