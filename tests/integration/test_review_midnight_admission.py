"""Review: budget admission over the windows a run reaches; the commitment a crossing run books is seen there."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.service.budgets import PricedOption
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, DAY, OD_POOL, H, services, team

MIDNIGHT = NOW_S + 10 * DAY  # 2026-01-11T00:00:00Z


def test_a_run_booked_before_midnight_counts_in_the_next_days_budget_for_later_admissions(database: Database) -> None:
    """Review (fixed), the defect: admission checked only the current window, so the 9 h after midnight of a run
    admitted at 23:00 were never checked, nor seen by later admissions (both 10 h runs were admitted: 123.84 $
    committed against the next day's 100 $). Now: 1 GPU at 6.88 $/h for 10 h (61.92 $ tomorrow) fits; a second
    one would take tomorrow to 123.84 $ and queues until tomorrow ends, with a degrade option that fits every day
    taken instead; a run of 0 s (until midnight) is checked in today only; at midnight the day opens within its
    budget."""
    svc, clock, _finops = services(database, MIDNIGHT - H)  # 23:00
    team(svc, "t1")
    svc.budgets.set(ADMIN, "t1", limit_usd=Decimal(100), period="day", enforce=True)

    def ask(gpus: int, run_s: int, degrade: list[PricedOption] | None = None) -> tuple[str, object, object]:
        out = svc.budgets.admit_placement(
            ADMIN, "t1", preferred=PricedOption("requested", 6_880_000, gpus, OD_POOL), degrade=degrade or [],
            expected_run_s=run_s, context={},
        )  # fmt: skip
        assert out is not None
        return out.action.value, out.option, out.body["retry_at_s"]

    assert ask(1, 10 * H) == ("admit", "requested", None)
    assert ask(1, 10 * H) == ("queue", None, MIDNIGHT + DAY)  # tomorrow would hold 123.84 $ of 100 $
    half = PricedOption("degrade_options[0]", 3_440_000, 1, OD_POOL)  # 3.44 $/h: 30.96 $ tomorrow
    assert ask(1, 10 * H, [half]) == ("degrade", "degrade_options[0]", None)
    assert ask(8, 0) == ("admit", "requested", None)  # until midnight: 55.04 $ today, nothing tomorrow
    clock.set(MIDNIGHT)
    st = svc.budgets.status(ADMIN, "t1")
    assert st["committed_usd"] == Decimal("92.88") and st["spent_usd"] <= st["limit_usd"]
