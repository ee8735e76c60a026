"""Review (susp): what a viewer's reads of GET /v1/capacity/forecast store for accuracy tracking
(service/accuracy.py ``record``), what GET /v1/capacity/forecast/accuracy reads back, and a forecast whose
recording fails, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, func, select, text
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import ForecastIssueRow
from gpufleet.service.accuracy import ForecastAccuracyService
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory
from tests.integration.test_review_fcst_accuracy import SKU, _hourly, _ingest, _rows

DAY = 86400
VIEWER = Actor("vic", Role.VIEWER, None)


def test_a_viewer_cannot_store_one_forecast_per_horizon(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: each distinct ``days`` (1..730) of GET /v1/capacity/forecast is a distinct
    forecast, stored: one viewer token storing 730 forecasts per SKU per day (16 MB a SKU a day on SQLite; 2,920 rows
    in four days made the accuracy endpoint read 66 MB). Expected: a bounded number per SKU and issue day (8), the
    forecast still served; the control loop's own forecast (the reconciler's pass) is stored even past it."""
    s = make_server(database)
    _ingest(s, _hourly(NOW_S - 28 * DAY, 28 * 24, 8.0))
    with s.client("viewer", "vic") as v:
        for days in range(1, 21):
            r = v.get("/v1/capacity/forecast", params={"sku": SKU, "days": days})
            assert r.status_code == 200 and len(r.json()["demand"]) == days, r.text
    assert _rows(database) <= 8
    s.services.reconciler.run_once()
    with Session(database.engine) as db:
        horizons = [len(json.loads(v)[0]) for v in db.scalars(select(ForecastIssueRow.values_json))]
    assert s.services.reconciler.forecast_days in horizons


@contextmanager
def _write_lock(database: Database) -> Iterator[None]:
    """Another process holding the store's write lock (SQLite) or an exclusive lock on the forecast table
    (PostgreSQL) for as long as the block runs."""
    if database.backend == "sqlite":
        conn = sqlite3.connect(database.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with database.engine.connect() as conn:
        conn.execute(text("LOCK TABLE forecast_issues IN ACCESS EXCLUSIVE MODE"))
        try:
            yield
        finally:
            conn.rollback()


def test_a_forecast_whose_recording_fails_is_still_served(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the capacity forecast records what it serves in the same request; when that write
    fails (the store's write lock held past the busy timeout, a lock or statement timeout, a read-only replica) the
    viewer's read fails with it (503), though nothing the viewer asked for needs the write. Expected: the forecast
    is served; the recording is skipped (and logged)."""
    engine = make_engine(database.url, busy_timeout_s=0.5, statement_timeout_s=1.0)
    try:
        s = make_server(Database(database.url, database.backend, engine))
        _ingest(s, _hourly(NOW_S - 14 * DAY, 14 * 24, 8.0))
        with s.client("viewer", "vic") as v, _write_lock(database):  # the token is issued before the lock
            r = v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 7})
        assert r.status_code == 200, r.text
        assert len(r.json()["demand"]) == 7
    finally:
        engine.dispose()


def _past_forecasts(database: Database, n: int) -> None:
    """``n`` forecasts of 7 days issued on each of the last ``n`` days, as a month of viewers' reads left them."""
    band = [[6.0] * 7, [8.0] * 7, [10.0] * 7]
    with Session(database.engine) as db:
        for d in range(n, 0, -1):
            start = NOW_S - d * DAY
            db.add(ForecastIssueRow(series_id=SKU, model="gpufleet:auto", issued_at_s=start + 60, start_s=start,
                                    step_s=DAY, scale=8.0, quantiles_json="[0.1, 0.5, 0.9]",
                                    values_json=json.dumps(band)))  # fmt: skip
        db.commit()


def test_accuracy_reads_only_the_forecasts_it_reports(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: ``accuracy`` loaded every stored forecast of every series (and the actuals since
    the oldest) to report the last ``last`` of each: its work grew with everything ever stored, by anyone. Expected:
    per series, only the most recent ``last`` forecasts with an elapsed day are read (and counted by SQL, the ones
    not elapsed yet)."""
    s = make_server(database)
    _ingest(s, _hourly(NOW_S - 70 * DAY, 70 * 24, 8.0))
    _past_forecasts(database, 60)
    loaded: list[Any] = []
    listener = lambda target, context: loaded.append(target)  # noqa: E731
    event.listen(ForecastIssueRow, "load", listener)
    try:
        service = ForecastAccuracyService(database.engine, FixedClock(NOW_S))
        out = service.accuracy(VIEWER, sku_id=SKU, last=5)["series"][0]
    finally:
        event.remove(ForecastIssueRow, "load", listener)
    assert out["forecasts_scored"] == 5 and out["forecasts_pending"] == 0, out
    assert len(loaded) <= 5
    with Session(database.engine) as db:
        assert db.scalar(select(func.count()).select_from(ForecastIssueRow)) == 60
