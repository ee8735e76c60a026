"""Records whose utilization was not measured (``gpu_util`` null: the Kubernetes meter on a cluster without DCGM),
over real HTTP on SQLite and PostgreSQL: their GPUs count for cost and planning, and their time is neither busy nor
idle (no idle waste, no idle flag, no rightsizing on a guess); a partly measured workload's waste is that of its
measured part. Also the migration: an older store upgrades with its records intact, and downgrading refuses while
such records exist."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import text

from gpufleet.adapters.sql import migrate
from tests.integration.conftest import BACKENDS, NOW_S, Database, _make_database
from tests.integration.finops_server import WEEK_BUCKETS, Seeded, _records, seed

PROBLEM = "application/problem+json"
HOURS = 168


@pytest.fixture
def seeded(database: Database) -> Iterator[Seeded]:
    sd = seed(database)
    yield sd
    sd.server.stop()


def _unmeasured(records: list[dict[str, Any]], *, from_bucket: int = 0) -> list[dict[str, Any]]:
    return [r | {"gpu_util": None} if i >= from_bucket else r for i, r in enumerate(records)]


def test_unmeasured_time_costs_money_and_is_never_idle_waste(seeded: Seeded) -> None:
    """team-b's workload holds 1.5 GPUs for the week at 2 % busy; its records re-sent without a utilization."""
    s, wl_b = seeded.server, seeded.wl_b
    with s.client("finops_admin", "alice") as fin:
        before = fin.get(f"/v1/workloads/{wl_b}/cost").json()
        fleet_before = fin.get("/v1/fleet/utilization", params={"sku": "h100_80gb"}).json()
        (use_before,) = fin.get("/v1/plans/regions", params={"sku": "h100_80gb"}).json()["skus"]
    assert before["idle_waste_usd"] > 0 and before["utilization"] == pytest.approx(0.02)
    assert fleet_before["util_measured_gpu_hours"] == pytest.approx(7.5 * HOURS)

    with s.client("ml_platform_admin", "bob") as admin:  # the second half of the week's utilization not measured
        half = _unmeasured(_records(wl_b, "team-b", 1.5, 0.02), from_bucket=WEEK_BUCKETS // 2)
        assert admin.post("/v1/utilization:ingest", json={"records": half}).json()["updated"] == WEEK_BUCKETS
    with s.client("finops_admin", "alice") as fin:
        part = fin.get(f"/v1/workloads/{wl_b}/cost").json()
    assert part["cost_usd"] == before["cost_usd"] and part["allocated_gpu_h"] == pytest.approx(1.5 * HOURS)
    assert part["measured_gpu_h"] == pytest.approx(1.5 * HOURS / 2) and part["utilization"] == pytest.approx(0.02)
    # the waste is the measured half's: (0.5 - 0.01) of the direct cost instead of 0.98 of it
    assert part["idle_waste_usd"] == pytest.approx(before["idle_waste_usd"] / 2, abs=0.02)

    with s.client("ml_platform_admin", "bob") as admin:  # none of it measured
        none = _unmeasured(_records(wl_b, "team-b", 1.5, 0.02))
        assert admin.post("/v1/utilization:ingest", json={"records": none}).json()["updated"] == WEEK_BUCKETS
    with s.client("finops_admin", "alice") as fin, s.client("app_team", "ben", team="team-b") as ben:
        cost = ben.get(f"/v1/workloads/{wl_b}/cost").json()
        fleet = fin.get("/v1/fleet/utilization", params={"sku": "h100_80gb"}).json()
        ov = fin.get("/ui/api/overview").json()
        overview = ov["kpis"]
        rows = {r["key"]: r for r in fin.get("/ui/api/breakdown", params={"dim": "team"}).json()["rows"]}
        csv_rows = fin.get("/ui/api/breakdown.csv", params={"dim": "team"}).text.splitlines()
        idle = {f["workload"] for f in fin.get("/ui/api/opportunities").json()["idle"]}
        (use,) = fin.get("/v1/plans/regions", params={"sku": "h100_80gb"}).json()["skus"]
    # the GPUs it held still cost what they cost, and count for planning
    assert cost["cost_usd"] == before["cost_usd"] and cost["gpu_hours"] == pytest.approx(1.5 * HOURS)
    assert use["unattributed_gpu_h"] == use_before["unattributed_gpu_h"] > 0
    # how busy they were is unknown: no utilization, no idle share, no waste, no idle flag, no rightsizing guess
    assert cost["utilization"] is None and cost["idle_pct"] is None and cost["measured_gpu_h"] == 0
    assert cost["idle_waste_usd"] == 0 and wl_b not in idle
    assert cost["rightsizing"]["reason"] == "no_utilization" and cost["rightsizing"]["recommended_gpus"] is None
    # the fleet's utilization is over what was measured: team-a's 6 GPUs at 50 %
    assert fleet["avg_util"] == pytest.approx(0.5) and fleet["util_measured_gpu_hours"] == pytest.approx(6 * HOURS)
    assert fleet["gpu_hours"] == pytest.approx(7.5 * HOURS)
    assert overview["utilization"] == pytest.approx(0.5) and overview["measured_gpu_h"] == pytest.approx(6 * HOURS)
    assert sum(ov["daily"]["unmeasured_gpu_h"]) == pytest.approx(1.5 * HOURS)  # the dashboard's daily chart
    assert sum(ov["daily"]["used_gpu_h"]) == pytest.approx(6 * HOURS * 0.5)
    assert rows["team-b"]["utilization"] is None and rows["team-b"]["measured_gpu_h"] == 0
    header, *body = csv_rows
    assert header.split(",")[:5] == ["team", "allocated_gpu_h", "used_gpu_h", "utilization", "measured_gpu_h"]
    (b_row,) = [r.split(",") for r in body if r.startswith("team-b,")]
    assert b_row[3] == "" and float(b_row[4]) == 0


def test_csv_takes_an_empty_utilization_and_still_refuses_a_bad_one(seeded: Seeded) -> None:
    s, wl_a = seeded.server, seeded.wl_a
    head = "source,bucket_start_s,bucket_s,workload_id,team_id,sku_id,gpus_allocated,gpu_util\n"
    t = NOW_S - 3600
    csv_ok = head + f"k8s:c1,{t},3600,{wl_a},team-a,h100_80gb,6,\n"
    with s.client("ml_platform_admin", "bob") as admin:
        r = admin.post("/v1/utilization:ingest", content=csv_ok, headers={"Content-Type": "text/csv"})
        assert r.status_code == 200 and r.json()["inserted"] == 1, r.text
        for bad, why in (("1.5", "must be in [0, 1]"), ("busy", "bad value")):
            r = admin.post("/v1/utilization:ingest", content=head + f"k8s:c1,{t},3600,{wl_a},team-a,h100_80gb,6,{bad}\n",
                           headers={"Content-Type": "text/csv"})  # fmt: skip
            assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM) and why in r.text, r.text
        # JSON: null is "not measured"; the field is still required (a client that forgets it is told)
        rec = {"source": "k8s:c1", "bucket_start_s": t, "bucket_s": 3600, "workload_id": wl_a, "team_id": "team-a",
               "sku_id": "h100_80gb", "gpus_allocated": 6}  # fmt: skip
        r = admin.post("/v1/utilization:ingest", json={"records": [rec]})
        assert r.status_code == 422 and "gpu_util" in r.text
        r = admin.post("/v1/utilization:ingest", json={"records": [rec | {"gpu_util": None}]})
        assert r.status_code == 200 and r.json()["updated"] == 1, r.text


@pytest.fixture(params=BACKENDS)
def store_0011(request: pytest.FixtureRequest, tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database(request.param, tmp_path, pg_reason, revision="0011_capacity_block_purchases")


def _downgrade(db: Database, revision: str) -> None:
    cfg = migrate.alembic_config(db.engine)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


INSERT = text(
    "INSERT INTO utilization (source, bucket_start_s, workload_id, bucket_s, team_id, sku_id, gpus_allocated, "
    "gpu_util) VALUES (:src, 0, 'wl', 3600, 't', 'h100_80gb', 2.0, :u)"
)


def test_the_migration_keeps_records_and_downgrading_refuses_unmeasured_ones(store_0011: Database) -> None:
    db = store_0011
    with db.engine.begin() as conn:
        conn.execute(INSERT, {"src": "dcgm", "u": 0.4})
    assert migrate.upgrade(db.engine) == ("0011_capacity_block_purchases", migrate.head_revision(db.engine))
    with db.engine.begin() as conn:
        conn.execute(INSERT, {"src": "k8s", "u": None})
    with pytest.raises(RuntimeError, match="1 utilization record"):
        _downgrade(db, "0011_capacity_block_purchases")
    with db.engine.connect() as conn:  # nothing lost, nothing made up
        rows = sorted(tuple(r) for r in conn.execute(text("SELECT source, gpu_util FROM utilization")))
    assert rows == [("dcgm", 0.4), ("k8s", None)]
    assert migrate.current_revision(db.engine) == migrate.head_revision(db.engine)
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM utilization WHERE gpu_util IS NULL"))
    _downgrade(db, "0011_capacity_block_purchases")
    assert migrate.current_revision(db.engine) == "0011_capacity_block_purchases"
    with db.engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(text("SELECT source, gpu_util FROM utilization"))] == [("dcgm", 0.4)]
