"""Review (fencing): a lying clock. The planning cadence is measured from the last recorded pass of any process
(``Reconciler.due``), so one process whose clock ran ahead must not stall every other one."""

from __future__ import annotations

from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from gpufleet.service.uow import UnitOfWork
from tests.integration.conftest import NOW_S, Database

DAY = 86_400


def test_a_pass_recorded_by_a_clock_far_ahead_does_not_stall_the_cadence(database: Database) -> None:
    """Review (fixed), the defect: a leader whose clock ran a year ahead (a bad NTP answer, a VM restored with a wrong
    RTC) recorded its ``reconciler.pass`` at that time. ``due`` took the latest recorded pass, so on every process
    with a correct clock ``now - last`` was negative: no planning pass for a year, silently (nothing fails, nothing is
    logged). Now a pass recorded after the reader's now is not taken as the last one: the cadence goes on from the
    passes at or before now (or from when this process took the lead)."""
    with UnitOfWork(database.engine, write=True) as uow:
        uow.audit(at_s=NOW_S + 365 * DAY, actor="reconciler", action="reconciler.pass", entity="reconciler",
                  entity_id="host-ahead:1")  # fmt: skip
        uow.commit()
    s = build_services(Settings(db_url=database.url, reconcile_interval_s=0), clock=FixedClock(NOW_S + 2 * DAY))
    try:
        assert s.reconciler.due(DAY, leading_since_s=NOW_S)  # two days of leading, no pass at or before now
        with UnitOfWork(database.engine, write=True) as uow:  # this process's own pass, at its now
            uow.audit(at_s=NOW_S + 2 * DAY, actor="reconciler", action="reconciler.pass", entity="reconciler",
                      entity_id="host-right:2")  # fmt: skip
            uow.commit()
        assert not s.reconciler.due(DAY, leading_since_s=NOW_S)  # and then waits a period from it
    finally:
        s.leader.close()
        s.engine.dispose()
