"""Review (susp): the expected run of a request put to budget admission through the service's Python API
(``BudgetService.admit_placement``; the HTTP schema bounds it at 366 days), on SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import TeamRow
from gpufleet.control.admission import PricedOption
from gpufleet.domain.errors import ValidationError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.budgets import BudgetService
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database

ADMIN = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
POOL = "aws/us-east-1/h100_80gb/on_demand"


@pytest.mark.parametrize("run_s", [10**19, 2**62, -1])
def test_an_unbounded_expected_run_is_refused_naming_the_field(database: Database, run_s: int) -> None:
    """Review (fixed), the defect: ``admit_placement`` took any ``expected_run_s`` and booked a commitment ending at
    ``now + expected_run_s``: 10^19 s is an OverflowError from the driver (SQLite) or a DataError (PostgreSQL), and
    2^62 s is booked as a commitment that counts in every later window of the team for 146 billion years. The HTTP
    schema's bound (0..366 days) belongs to the service, where every caller meets it."""
    with Session(database.engine) as s:
        s.add(TeamRow(id="t-run", name="run"))
        s.commit()
    budgets = BudgetService(database.engine, FixedClock(NOW_S))
    budgets.set(ADMIN, "t-run", limit_usd=Decimal(100_000), period="month", enforce=True)
    with pytest.raises(ValidationError) as err:
        budgets.admit_placement(ADMIN, "t-run", preferred=PricedOption("p", 1_000_000, 8, POOL), degrade=[],
                                expected_run_s=run_s, context={})  # fmt: skip
    assert err.value.field == "expected_run_s"
    ok = budgets.admit_placement(ADMIN, "t-run", preferred=PricedOption("p", 1_000_000, 8, POOL), degrade=[],
                                 expected_run_s=366 * 86_400, context={})  # fmt: skip
    assert ok is not None and ok.action.value == "admit"
