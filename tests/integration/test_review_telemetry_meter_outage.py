"""Review (hostile): the controller's usage meter (adapters/kubernetes/usage.py ``MeterLoop``) when Prometheus
refuses its DCGM query for good, with the records written through the real ingest service (SQLite).

The upstream is a tiny HTTP server on loopback answering what a real Prometheus answers a query over its limits
(``--query.max-samples``): 422 with ``"status":"error"``."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.usage import MeterLoop, store_pools
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import UtilizationRow
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, TelemetryUnavailable
from gpufleet.cost.telemetry import TelemetryBatch
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from gpufleet.service.ingest import IngestService
from tests.integration.test_review_telemetry_prometheus_answers import upstream
from tests.integration.test_review_telemetry_samples import T0, _observation

H = 3600
TOO_MANY = {"status": "error", "errorType": "execution",
            "error": "query processing would load too many samples into memory in query execution"}  # fmt: skip


def _refuse(h: BaseHTTPRequestHandler) -> None:
    raw = json.dumps(TOO_MANY).encode()
    h.send_response(422)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(raw)))
    h.end_headers()
    h.wfile.write(raw)


def test_gpu_hours_are_not_lost_when_prometheus_refuses_the_dcgm_query_for_good(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``MeterLoop.write_due`` read DCGM before it wrote an hour; when the read failed
    the hour was kept and tried again, and once more than ``keep_hours`` (48) waited, the oldest were dropped. A
    Prometheus that refuses the query for good (over its sample limit on a big cluster, an answer over the adapter's
    size cap, a garbled series) never let an hour through: the GPUs the cluster held were never written, and after
    two days every hour was thrown away. Now an hour whose DCGM read still fails ``util_wait_s`` (3 h) after its end
    is written with its utilization not measured, as the same meter without Prometheus writes it."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    ingest = IngestService(engine, FixedClock(T0 + 60 * H))
    admin = Actor("controller", Role.ML_PLATFORM_ADMIN, None)

    def pools() -> tuple[list[str], dict[tuple[str, str, str], str]]:
        with Session(engine) as s:
            return store_pools(s)

    obs = _observation(["train"])
    with upstream(_refuse) as url, PrometheusTelemetry(url) as prom:
        loop = MeterLoop("k3", pools, prom.gpu_utilization, lambda r: ingest.ingest_leaving_out(admin, r), every_s=600)
        for k in range(52 * 6 + 1):  # 52 hours, a reading every 10 minutes
            loop.step(T0 + 600.0 * k, lambda: obs)
    with Session(engine) as s:
        hours = s.scalar(
            select(func.count()).select_from(UtilizationRow).where(UtilizationRow.workload_id == "ml:train")
        )
    engine.dispose()
    assert loop.failures  # Prometheus refused, and that is reported
    # hours 0-48 written (hour h once 3 h past its end, h + 4 h <= 52 h); none dropped
    assert hours == 49, f"{hours} hours of 1 GPU written, {len(loop.dropped_hours)} dropped"
    assert loop.dropped_hours == []
    assert all(w.util_unmeasured_gpu_h == pytest.approx(1.0) for w in loop.written), loop.written[:3]
    assert any("utilization not measured after 10800 s" in f for f in loop.failures)


def test_an_hour_waits_for_a_prometheus_outage_shorter_than_util_wait_s(tmp_path: Path) -> None:
    """A Prometheus down for two hours, then back: the hours of the outage are written with their utilization
    (nothing is given up before ``util_wait_s``)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    ingest = IngestService(engine, FixedClock(T0 + 60 * H))
    admin = Actor("controller", Role.ML_PLATFORM_ADMIN, None)

    def pools() -> tuple[list[str], dict[tuple[str, str, str], str]]:
        with Session(engine) as s:
            return store_pools(s)

    obs = _observation(["train"])
    down = {"until": T0 + 3 * H}

    def utilization(start_s: int, end_s: int, step_s: int) -> TelemetryBatch:
        if now["t"] < down["until"]:
            raise TelemetryUnavailable("prometheus down")
        return TelemetryBatch((), np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0))

    now = {"t": float(T0)}
    loop = MeterLoop("k3", pools, utilization, lambda r: ingest.ingest_leaving_out(admin, r), every_s=600)
    for k in range(6 * 6 + 1):  # 6 hours
        now["t"] = T0 + 600.0 * k
        loop.step(now["t"], lambda: obs)
    engine.dispose()
    assert [w.start_s for w in loop.written] == [T0 + h * H for h in range(5)]
    assert loop.failures and not any("not measured after" in f for f in loop.failures)
