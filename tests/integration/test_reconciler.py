"""The service's reconciler (service/reconciler.py): one pass forecasts from ingested utilization and proposes
reservations that need their approvals as usual; on PostgreSQL, of two processes only the leader reconciles."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from gpufleet.adapters.sql.models import AuditEventRow, ForecastIssueRow, ReservationRow, UtilizationRow
from gpufleet.control.loop import ControlLoop
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.leader import AdvisoryLockLeader
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory, _make_database

DAY = 86400
SKU = "h100_80gb"
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


def _records(start_s: int, days: int, gpus: float) -> list[dict[str, Any]]:
    return [
        {"source": "dcgm", "bucket_start_s": start_s + d * DAY + h * 3600, "bucket_s": 3600, "workload_id": "wl-r",
         "team_id": "team-r", "sku_id": SKU, "pool_id": f"aws/us-east-1/{SKU}/on_demand", "gpus_allocated": gpus,
         "gpu_util": 0.6}
        for d in range(days)
        for h in range(24)
    ]  # fmt: skip


def _ingest(server: LiveServer, records: list[dict[str, Any]]) -> None:
    with server.client("ml_platform_admin", "bob") as c:
        r = c.post("/v1/utilization:ingest", json={"records": records})
        assert r.status_code == 200, r.text


def test_a_pass_proposes_from_ingested_utilization_and_the_proposal_needs_two_approvals(
    database: Database, make_server: ServerFactory
) -> None:
    s = make_server(database)
    nothing = s.services.reconciler.run_once()  # nothing ingested: nothing forecast, nothing proposed
    assert nothing.forecasts == [] and nothing.proposals == []
    # 28 days of hourly use: four weeks, past the loop procurer's minimum history (7 days) and its lookback
    _ingest(s, _records(NOW_S - 28 * DAY, 28, 24))
    # the loop the simulator runs, assembled in its one place, and the context of this SKU-region before the pass
    procurement = s.services.procurement
    loop = ControlLoop.gpufleet(0, tier_limits=procurement.tier_limits([SKU]))
    ctx, held = procurement.context(SKU, "us-east-1", loop, forecast_h=7 * 24)
    assert held == [] and ctx.committed_gpus_at_lead == 0 and ctx.pool.id == f"aws/us-east-1/{SKU}/reserved"
    assert ctx.now_s == NOW_S and ctx.gpus_per_node == 8 and ctx.forecast is not None
    np.testing.assert_array_equal(ctx.demand_history_gpus, np.full(28 * 24, 24.0))  # the ingested hours
    expected = loop.procurer.propose(ctx)
    assert [p.units for p in expected] == [24], expected  # 24 GPUs used around the clock: three nodes committed
    done = s.services.reconciler.run_once()
    assert [f["sku"] for f in done.forecasts] == [SKU] and done.forecasts[0]["history_days"] == 28
    (prop,) = done.proposals
    assert prop["region"] == "us-east-1" and prop["region_reason"] == "most_used_region"
    assert prop["created"], prop
    # what the reconciler proposed is what the loop's procurer proposes for the same context
    assert prop["procurer"] == type(loop.procurer).__name__ == "ForecastLedProcurer"
    assert prop["proposed"] == [
        {"units": p.units, "start_s": p.start_s, "term_months": p.term_months, "reason": p.reason} for p in expected
    ]
    with database.engine.connect() as conn:
        made = conn.execute(select(ReservationRow.units, ReservationRow.start_s, ReservationRow.term_months)).all()
    assert sorted(tuple(r) for r in made) == sorted((p.units, p.start_s, p.term_months) for p in expected)
    with database.engine.connect() as conn:  # the forecast was recorded for accuracy tracking like a served one
        assert conn.execute(select(ForecastIssueRow.series_id)).scalars().all() == [SKU]
        audit = conn.execute(select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass"))
        details = [json.loads(d) for d in audit.scalars()]
    assert len(details) == 2 and details[-1]["proposals"][0]["created"] == prop["created"]
    again = s.services.reconciler.run_once()  # the same orders are held now: nothing proposed twice
    assert again.proposals[0]["created"] == []
    rid = prop["created"][0]
    with (
        s.client("viewer", "vic") as v,
        s.client("finops_admin", "fay") as fin,
        s.client("ml_platform_admin", "bob") as ml,
    ):
        res = v.get(f"/v1/reservations/{rid}").json()
        assert res["status"] == "pending_approval" and res["approvals_required"] == 2
        assert fin.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ml-2026"}).status_code == 200
        assert v.get(f"/v1/reservations/{rid}").json()["status"] == "pending_approval"  # one approval is not enough
        done_ = ml.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ml-2026"})
        assert done_.status_code == 200 and done_.json()["status"] == "submitted_to_cloud"


@pytest.mark.parametrize("low_hours", [1, 2])
def test_a_last_hour_ingested_late_does_not_hold_the_days_buying(
    database: Database, make_server: ServerFactory, low_hours: int
) -> None:
    """The pass plans from the hours up to midnight. When the last hour's utilization is only partly ingested it reads
    low (5 of 24 GPUs here); the procurer's step-down hold (docs/procure.md step 6) needs the last two hours below
    the break-even share of the days before, so one such hour still lets the pass buy, and two hold it."""
    s = make_server(database)
    records = _records(NOW_S - 28 * DAY, 28, 24)
    for r in records[-low_hours:]:
        r["gpus_allocated"] = 5.0
    _ingest(s, records)
    (prop,) = s.services.reconciler.run_once().proposals
    bought = sum(p["units"] for p in prop["proposed"])
    if low_hours == 1:
        assert bought == 24 and prop["created"], prop  # three nodes, as with the whole last hour
    else:
        assert bought == 0 and prop["created"] == [], prop  # a step down: nothing new is committed


@pytest.mark.parametrize("grace_h", [3, 0])
def test_hours_still_being_ingested_take_the_day_befores(
    database: Database, make_server: ServerFactory, grace_h: int
) -> None:
    """The source delivers 10-minute buckets and, when the pass runs at midnight, has sent the last two hours only up
    to 22:20 (service/late_hours.py). Summed, hours 22 and 23 read 8 and 0 of 24 GPUs: with the default grace they
    take the same hours of the day before and the pass buys its three nodes; read as they are, they are two low
    hours and the step-down hold buys nothing. Complete low hours still hold (the test above)."""
    s = make_server(database, ingest_grace_h=grace_h)
    records = _records(NOW_S - 28 * DAY, 28, 24)[:-2]  # hourly buckets up to 22:00
    records += [
        {**records[-1], "bucket_start_s": NOW_S - 2 * 3600 + k * 600, "bucket_s": 600} for k in range(2)
    ]  # 22:00-22:20 arrived; 22:20-24:00 not yet
    _ingest(s, records)
    (prop,) = s.services.reconciler.run_once().proposals
    bought = sum(p["units"] for p in prop["proposed"])
    late = s.services.procurement.late_hours(SKU, NOW_S)
    if grace_h:
        assert late == 2 and bought == 24 and prop["created"], prop
    else:
        assert late == 0 and bought == 0 and prop["created"] == [], prop


def test_the_capacity_forecast_fills_the_same_late_hours(database: Database, make_server: ServerFactory) -> None:
    """The daily forecast the pass records (GET /v1/capacity/forecast) reads the last day with its late hours filled
    the same way. The use grows a GPU a day, so the forecast follows the last day: filled from the day before, its
    two late hours are one GPU low, read as they are about 25 and 37 GPUs low, and the forecast is that much further
    from the complete day's."""
    whole = [r for d in range(28) for r in _records(NOW_S - (28 - d) * DAY, 1, 10.0 + d)]
    late = whole[:-2] + [
        {**whole[-3], "bucket_start_s": NOW_S - 2 * 3600 + k * 600, "bucket_s": 600} for k in range(2)
    ]  # 22:00-22:20 arrived
    got = {}
    for name, records, grace in (("whole", whole, 3), ("filled", late, 3), ("as_read", late, 0)):
        s = make_server(database, ingest_grace_h=grace)
        with database.engine.begin() as conn:  # one store, refilled per case
            conn.execute(UtilizationRow.__table__.delete())
        _ingest(s, records)
        with s.client("viewer", "vic") as v:
            got[name] = v.get("/v1/capacity/forecast", params={"sku": SKU, "days": 3}).json()["demand"]

    def off(name: str) -> float:
        return sum(abs(a["p50"] - b["p50"]) for a, b in zip(got[name], got["whole"], strict=True))

    assert 0 < off("filled") < off("as_read") / 10, got


def test_reconcile_once_from_the_cli_prints_the_pass(tmp_path: Path, sqlite_template: Path) -> None:
    gen = _make_database("sqlite", tmp_path, None, sqlite_template)
    db = next(gen)
    try:
        services = build_services(Settings(db_url=db.url), engine=db.engine)
        now = int(time.time()) // DAY * DAY  # the CLI runs on the wall clock
        services.ingest.ingest(Actor("bob", Role.ML_PLATFORM_ADMIN, None), _records(now - 28 * DAY, 28, 24))
        out = subprocess.run(
            [GPUFLEET, "reconcile", "--once", "--db", db.url], capture_output=True, text=True, timeout=120, check=False
        )
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["leader"] is True and got["proposals"][0]["created"]
        with db.engine.connect() as conn:
            status = conn.execute(select(ReservationRow.status)).scalars().all()
        assert status and set(status) == {"pending_approval"}
    finally:
        gen.close()


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


def _reconciler(url: str, log: Path, passes: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GPUFLEET_PLAN_INTERVAL_S": "0.5", "GPUFLEET_LEADER_POLL_S": "0.2"}
    return subprocess.Popen(
        [GPUFLEET, "reconcile", "--db", url, "--interval-s", "0.2", "--passes", str(passes)],
        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def _passes_by_process(db: Database) -> dict[str, int]:
    with db.engine.connect() as conn:
        rows = conn.execute(select(AuditEventRow.entity_id).where(AuditEventRow.action == "reconciler.pass")).all()
    out: dict[str, int] = {}
    for (proc,) in rows:
        out[proc] = out.get(proc, 0) + 1
    return out


@pytest.mark.postgres
def test_of_two_processes_only_the_leader_reconciles(pg_database: Database, tmp_path: Path) -> None:
    first = _reconciler(pg_database.url, tmp_path / "a.log", passes=0)  # until terminated
    try:
        deadline = time.monotonic() + 60
        while not _passes_by_process(pg_database) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _passes_by_process(pg_database), (tmp_path / "a.log").read_text()[-2000:]
        second = _reconciler(pg_database.url, tmp_path / "b.log", passes=15)  # about 3 s, while the first leads
        assert second.wait(timeout=60) == 0, (tmp_path / "b.log").read_text()[-2000:]
        assert first.poll() is None, "the first process must still lead while the second runs"
        by_process = _passes_by_process(pg_database)
        (leader,) = by_process  # one process ran every pass
        assert leader.endswith(f":{first.pid}") and by_process[leader] >= 2
        lines = [json.loads(x) for x in (tmp_path / "b.log").read_text().splitlines() if x.startswith("{")]
        assert lines and all(x == {"leader": False} for x in lines)
        # a held lock is one process's: a third party cannot take it either
        probe = AdvisoryLockLeader(pg_database.engine, poll_s=0.1)
        try:
            assert probe.refresh() is False
        finally:
            probe.close()
    finally:
        first.terminate()
        first.wait(timeout=30)


def _serve(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GPUFLEET_DB_URL": url, "GPUFLEET_RECONCILE_INTERVAL_S": "0.5",
           "GPUFLEET_PLAN_INTERVAL_S": "1", "GPUFLEET_LEADER_POLL_S": "0.2"}  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return subprocess.Popen(
        [GPUFLEET, "serve", "--port", str(port), "--log-level", "warning"],
        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.postgres
def test_two_serving_processes_run_the_planning_pass_in_the_leader_only(pg_database: Database, tmp_path: Path) -> None:
    procs = [_serve(pg_database.url, tmp_path / f"{i}.log") for i in range(2)]
    try:
        deadline = time.monotonic() + 90
        while sum(_passes_by_process(pg_database).values()) < 3 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), (tmp_path / "0.log").read_text()[-2000:]
            time.sleep(0.3)
        by_process = _passes_by_process(pg_database)
        assert sum(by_process.values()) >= 3, by_process
        (leader,) = by_process  # every pass by one process: the lock holder
        assert any(leader.endswith(f":{p.pid}") for p in procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
