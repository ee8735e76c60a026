"""``gpufleet reconcile``: the service's control loop without the HTTP API (service/reconciler.py).

``--once`` runs one pass now if this process leads (the PostgreSQL advisory lock; on SQLite it always leads) and
prints it as JSON. Without ``--once`` it keeps or takes the lead every ``--interval-s`` and, as leader, runs a pass
when one is due (``plan_interval_s``), ``--passes`` times at most (0 = until interrupted).

A pass the database fails (down, or a statement past ``db_statement_timeout_s``: a lock another session holds) is
one line, never a traceback: with ``--once`` ``error: reconciler pass failed: ...`` and exit 2; in the loop a JSON
line ``{"leader": true, "error": ...}``, and the loop goes on (as ``gpufleet serve`` does): the next check retries.
The loop reads the store's schema revision before each check: at another revision than this gpufleet's (restored
from an older backup, upgraded by a newer release) it does not lead (``{"leader": false, "error": ...}``) until the
store is back at its revision.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.service_settings import load_settings
from gpufleet.domain.errors import GpufleetError


class PassFailed(GpufleetError):
    """A reconciler pass the database failed (``--once``)."""


def register(app: typer.Typer) -> None:
    @app.command("reconcile")
    @user_errors
    def reconcile(
        db: Annotated[
            str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUFLEET_DB_URL or ./gpufleet.db)")
        ] = None,
        once: Annotated[bool, typer.Option("--once", help="One pass now (if this process leads), then exit")] = False,
        interval_s: Annotated[
            float,
            typer.Option(
                "--interval-s", min=0.05, max=86_400, help="Seconds between leadership checks (without --once)"
            ),
        ] = 1.0,
        passes: Annotated[int, typer.Option("--passes", min=0, help="Stop after this many checks (0 = never)")] = 0,
    ) -> None:
        """Forecast from ingested utilization, propose the reservations due into the approval workflow and
        re-evaluate placements, as the leader (`gpufleet serve` runs the same loop in the background)."""
        from sqlalchemy.exc import SQLAlchemyError

        from gpufleet.service.bootstrap import build_services
        from gpufleet.service.reconciler import failure_reason

        settings = load_settings(db_url=db)
        services = build_services(settings)
        try:
            n = 0
            leading_since_s: int | None = None
            while True:
                n += 1
                off = services.revision.check()  # the store may have been moved to another schema revision since
                if off is not None:
                    services.leader.close()  # not leading at another revision: a process at the store's takes it
                leader = off is None and services.leader.refresh()
                if not leader:
                    leading_since_s = None
                    typer.echo(json.dumps({"leader": False, **({} if off is None else {"error": off})}))
                else:
                    if leading_since_s is None:
                        leading_since_s = services.clock.now_s()
                    try:
                        if once or services.reconciler.due(settings.plan_interval_s, leading_since_s):
                            typer.echo(json.dumps({"leader": True, **services.reconciler.run_once().as_dict()}))
                    except SQLAlchemyError as exc:
                        if once:
                            raise PassFailed(f"reconciler pass failed: {failure_reason(exc)}") from None
                        typer.echo(json.dumps({"leader": True, "error": failure_reason(exc)}))
                    except Exception as exc:  # the loop is the leader's daemon: reported, the next check retries
                        if once:
                            raise
                        typer.echo(json.dumps({"leader": True, "error": failure_reason(exc)}))
                if once or (passes and n >= passes):
                    break
                time.sleep(interval_s)
        finally:
            services.leader.close()
            services.engine.dispose()
