"""Review (placement2): the degrade chain's queue answers when a deadline cannot be met (place/degrade.py, the
admission pipeline's budget stage in control/admission.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from gpufleet.control.admission import (
    AdmissionOutcome,
    AdmissionPipeline,
    ChainPlacementRequest,
    PoolHeadroom,
    PricedOption,
    decide_budget,
    team_budget,
)
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.workloads import Priority, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, recommend

NOW_S = 1_767_225_600
SKU = "h100_80gb"
POOLS = {p.tier: p for p in default_pools(SKU)}


def _training(deadline_s: int | None) -> Workload:
    return Workload("job", "job", WorkloadKind.TRAINING, "t", "tn", Priority.HIGH, (SKU,), 8, deadline_s=deadline_s)


def test_a_deadline_already_passed_is_missed_not_at_risk() -> None:
    """Review (fixed), the defect: place/degrade.py recommend queues a request whose deadline is already behind it (or that
    cannot finish by it even if it started now) with ``queued_deadline_at_risk``, the same answer as a request the
    queue might still serve in time: an operator cannot tell a lost cause from a tight one. Expected:
    ``queued_deadline_missed`` whatever the queue's estimate (with one, and without one); ``at_risk`` stays for a
    deadline the queue's estimate breaks but starting now would meet."""
    full = (PoolHeadroom(POOLS[Tier.RESERVED], 0, queue_wait_s=3600),)
    passed = recommend(DegradeRequest(_training(NOW_S - 60), NOW_S, full, expected_run_s=600))
    assert (passed.action, passed.reason, passed.expected_start_s) == ("queue", "queued_deadline_missed", NOW_S + 3600)
    no_signal = (PoolHeadroom(POOLS[Tier.RESERVED], 0),)
    blind = recommend(DegradeRequest(_training(NOW_S - 60), NOW_S, no_signal, expected_run_s=600))
    assert (blind.reason, blind.expected_start_s) == ("queued_deadline_missed", None)
    # the deadline is ahead but the run is longer than the time left: missed as well
    too_long = recommend(DegradeRequest(_training(NOW_S + 300), NOW_S, full, expected_run_s=600))
    assert too_long.reason == "queued_deadline_missed"
    # started now it would finish in time; the queue's estimate makes it late: at risk
    risky = recommend(DegradeRequest(_training(NOW_S + 1800), NOW_S, full, expected_run_s=600))
    assert risky.reason == "queued_deadline_at_risk"


def _pool(pool_id: str, tier: Tier, free: float, price: str) -> PoolHeadroom:
    return PoolHeadroom(CapacityPool(pool_id, "p", "r1", SKU, tier, Decimal(price)), free, 0.5)


def test_a_budget_queue_past_the_deadline_says_it_will_miss() -> None:
    """Review (fixed), the defect: control/admission.py AdmissionPipeline._budget queues a request the budget refuses with
    ``over_budget_queued`` and ``expected_start_s`` = the budget window's end whatever its deadline; when the window
    ends after the deadline (or after the deadline less the run) the retry is useless and the answer promises it
    anyway. Expected: ``over_budget_deadline_missed`` (the budget's ``retry_at_s`` is still reported); a deadline the
    retry still meets keeps ``over_budget_queued``."""
    pools = [_pool("od", Tier.ON_DEMAND, math.inf, "4"), _pool("res", Tier.RESERVED, 8, "2")]
    budget = team_budget("team-a", limit_cents=100, period="day", alert_at=(0.5,), enforce=True, now_s=NOW_S)

    def gate(p: PricedOption, d: Sequence[PricedOption], ctx: dict[str, Any]) -> AdmissionOutcome | None:
        call = decide_budget(budget, 0, p, d, expected_run_s=3600, workload_id="w", now_s=NOW_S)
        return AdmissionOutcome(call.decision.action, call.decision.option, {"retry_at_s": call.decision.retry_at_s})

    def ask(deadline_s: int) -> dict[str, Any]:
        req = ChainPlacementRequest(WorkloadKind.TRAINING, Priority.HIGH, SKU, 8, expected_run_s=3600,
                                    deadline_s=deadline_s)  # fmt: skip
        return AdmissionPipeline().decide(req, pools, now_s=NOW_S, price_uusd={"od": 4_000_000, "res": 2_000_000},
                                          budget=gate)  # fmt: skip

    # $16 for the hour > $1: refused until the day ends; the job must finish 6 hours from now
    late = ask(NOW_S + 6 * 3600)
    assert (late["action"], late["reason"]) == ("queue", "over_budget_deadline_missed")
    assert late["budget"]["retry_at_s"] == budget.window_end_s
    assert late["fallback"][-1]["trigger"] == "over_budget_deadline_missed"
    # a deadline the retry still meets (the window's end + the hour's run)
    ok = ask(budget.window_end_s + 3600)
    assert (ok["reason"], ok["expected_start_s"]) == ("over_budget_queued", budget.window_end_s)
