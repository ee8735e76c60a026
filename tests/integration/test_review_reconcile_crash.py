"""Review (reconcile): a reconciler process that dies in the middle of a pass, between two of its writes.

The crash is a real process exit (``os._exit``) in a subprocess, right after the transaction that wrote the pass's
first reservation committed; the next pass (a new process, the same store) must finish the job exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database

DAY = 86_400
SKU = "h100_80gb"

# a reconciler pass in its own process that exits (as a SIGKILL would leave it) right after the first transaction
# that wrote a reservation commits
CRASHING_PASS = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import event
    from sqlalchemy.orm import Session
    from gpufleet.adapters.sql.models import ReservationRow
    from gpufleet.service.bootstrap import build_services
    from gpufleet.service.clock import FixedClock
    from gpufleet.service.settings import Settings

    @event.listens_for(Session, "after_flush")
    def _mark(session, _ctx):
        if any(isinstance(o, ReservationRow) for o in session.new):
            session.info["wrote_reservation"] = True

    @event.listens_for(Session, "after_commit")
    def _die(session):
        if session.info.get("wrote_reservation"):
            os._exit(9)

    services = build_services(Settings(db_url=sys.argv[1], reconcile_interval_s=0), clock=FixedClock(int(sys.argv[2])))
    assert services.leader.refresh()
    services.reconciler.run_once()
    os._exit(0)
    """
)


def _records(start_s: int, days: int, gpus: float) -> list[dict[str, Any]]:
    return [
        {"source": "dcgm", "bucket_start_s": start_s + d * DAY + h * 3600, "bucket_s": 3600, "workload_id": "wl-c",
         "team_id": "team-c", "sku_id": SKU, "pool_id": f"aws/us-east-1/{SKU}/on_demand", "gpus_allocated": gpus,
         "gpu_util": 0.6}
        for d in range(days)
        for h in range(24)
    ]  # fmt: skip


def test_a_pass_killed_after_its_first_order_finishes_the_job_once_with_the_orders_reason(
    database: Database, tmp_path: Path
) -> None:
    """Review (fixed), the defect: ``ProcurementService.commit`` created each order (one transaction) and only after
    all of them wrote the audit event ``reservation.proposed_by_loop`` with the procurer's reason (and, for an order
    bought ahead of planned runs, the ``planned_run.reserved_ahead`` links a run's ``reserved_ahead`` is read from) in
    another transaction. A process killed between the two left a reservation the loop proposed with no reason; the
    next pass counts the order as held, proposes nothing, and so never wrote it: the reason (and a run's link) was
    lost for good. Now they are written in the order's own transaction."""
    services = build_services(Settings(db_url=database.url, reconcile_interval_s=0), engine=database.engine,
                              clock=FixedClock(NOW_S))  # fmt: skip
    services.ingest.ingest(Actor("bob", Role.ML_PLATFORM_ADMIN, None), _records(NOW_S - 28 * DAY, 28, 24))
    script = tmp_path / "crashing_pass.py"
    script.write_text(CRASHING_PASS)
    out = subprocess.run([sys.executable, str(script), database.url, str(NOW_S)], capture_output=True, text=True,
                         timeout=180, check=False)  # fmt: skip
    assert out.returncode == 9, out.stderr[-3000:]  # it died after writing the order, before the pass ended
    with database.engine.connect() as conn:
        (crashed,) = conn.execute(select(ReservationRow.id, ReservationRow.units)).all()  # the order survived
        assert conn.scalar(select(func.count()).where(AuditEventRow.action == "reconciler.pass")) == 0
    again = services.reconciler.run_once()  # the next pass, as the next leader runs it
    with database.engine.connect() as conn:
        rows = conn.execute(select(ReservationRow.id, ReservationRow.units, ReservationRow.status)).all()
        reasons = conn.execute(
            select(AuditEventRow.entity_id, AuditEventRow.detail_json).where(
                AuditEventRow.action == "reservation.proposed_by_loop"
            )
        ).all()
    assert [(r.id, r.units) for r in rows] == [tuple(crashed)], rows  # exactly once: no second order, none lost
    assert rows[0].status == "pending_approval" and again.proposals[0]["created"] == []
    # every order the loop proposed says why, once
    assert [r.entity_id for r in reasons] == [crashed.id], reasons
    assert json.loads(reasons[0].detail_json)["reason"]
