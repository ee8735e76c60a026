"""Review (fcst): the forecast accuracy tracking the service runs (service/accuracy.py) behind
GET /v1/capacity/forecast and GET /v1/capacity/forecast/accuracy, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from sqlalchemy import func, select

from gpufleet.adapters.sql.models import ForecastIssueRow
from gpufleet.service.accuracy import ForecastAccuracyService
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

DAY = 86400
SKU = "h100_80gb"


def _hourly(start_s: int, hours: int, gpus: float) -> list[dict[str, Any]]:
    return [
        {
            "source": "dcgm",
            "bucket_start_s": start_s + h * 3600,
            "bucket_s": 3600,
            "workload_id": "wl-acc",
            "team_id": "team-acc",
            "sku_id": SKU,
            "gpus_allocated": gpus,
            "gpu_util": 0.5,
        }
        for h in range(hours)
    ]


def _ingest(server: LiveServer, records: list[dict[str, Any]]) -> None:
    with server.client("ml_platform_admin", "bob") as c:
        r = c.post("/v1/utilization:ingest", json={"records": records})
        assert r.status_code == 200, r.text


def _rows(database: Database) -> int:
    with database.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ForecastIssueRow)).scalar_one())


def test_the_same_forecast_served_by_two_api_processes_is_stored_once(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the "stored once" check of ForecastAccuracyService.record was a per-process
    memory, so every API replica (the deployment runs 2-6) and every restart stored the same served forecast again,
    and the accuracy endpoint counted and averaged it once per copy."""
    first = make_server(database)
    _ingest(first, _hourly(NOW_S - 14 * DAY, 14 * 24, 8.0))
    second = make_server(database)  # another replica (or the same one restarted) over the same store
    for server in (first, second, first):
        with server.client("viewer", "vic") as v:
            r = v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 7})
            assert r.status_code == 200, r.text
    assert _rows(database) == 1
    with second.client("viewer", "vic") as v:
        acc = v.get("/v1/capacity/forecast/accuracy", params={"sku": SKU}).json()["series"][0]
    assert acc["forecasts_pending"] == 1


def test_concurrent_reads_of_one_forecast_store_it_once(database: Database) -> None:
    """Review (fixed), the defect: ForecastAccuracyService.record checked its memory of stored forecasts, then wrote
    without holding anything, so concurrent requests serving the same forecast each stored a copy."""
    service = ForecastAccuracyService(database.engine, FixedClock(NOW_S))
    band = np.tile([[6.0, 8.0, 10.0]], (7, 1))
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            barrier.wait()
            service.record(SKU, NOW_S, np.full(14, 8.0), band, "gpufleet:auto")
        except BaseException as exc:  # a failed write is a failed read too: report it
            errors.append(exc)

    # six pooled connections opened before the race (the CI lane once met libpq's 5 s connect timeout when six
    # threads opened theirs at the same instant on a loaded machine): the race under test is the write, not a connect
    warm = [database.engine.connect() for _ in range(6)]
    for c in warm:
        c.close()
    threads = [threading.Thread(target=serve) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _rows(database) == 1
    service.record(SKU, NOW_S, np.full(14, 8.0), band * 1.5, "gpufleet:auto")  # another forecast is still stored
    assert _rows(database) == 2


def test_accuracy_waits_for_the_last_hours_of_a_day_still_being_ingested(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ForecastAccuracyService.accuracy scored a day as soon as it ended, so right after
    midnight the day's last hours, not yet ingested (within GPUFLEET_INGEST_GRACE_H, which the capacity forecast
    fills for the same reason), read as a fall in demand and the forecast as worse than it was."""
    grace_h = 3
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock, ingest_grace_h=grace_h)
    _ingest(s, _hourly(NOW_S - 14 * DAY, 14 * 24, 8.0))
    with s.client("viewer", "vic") as v:
        assert v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 7}).status_code == 200
        _ingest(s, _hourly(NOW_S, 22, 8.0))  # the first forecast day: 22 of its 24 hours delivered so far
        clock.advance(DAY + 600)  # ten minutes past its end: its last two hours are within the ingest grace

        def series() -> dict[str, Any]:
            r = v.get("/v1/capacity/forecast/accuracy", params={"sku": SKU})
            assert r.status_code == 200, r.text
            out: dict[str, Any] = r.json()["series"][0]
            return out

        early = series()
        assert early["forecasts_scored"] == 0 and early["forecasts_pending"] == 1, early
        _ingest(s, _hourly(NOW_S + 22 * 3600, 2, 8.0))  # the late hours arrive: the day is complete
        complete = series()
        assert complete["forecasts_scored"] == 1 and complete["points"] == 1, complete
        clock.advance(DAY)  # the second day, never delivered past its 6th hour, once the grace has passed
        _ingest(s, _hourly(NOW_S + DAY, 6, 8.0))
        clock.advance(grace_h * 3600)
        late = series()
    assert late["forecasts_scored"] == 1 and late["points"] == 2, late
