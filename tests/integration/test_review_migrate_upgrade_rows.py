"""Review (migrate): a store written at EVERY older schema revision, filled with realistic rows (a reservation with
an approval, a workload with a rightsizing change, a token, audit events, utilization, budgets, planned runs,
Capacity Block purchases...), upgrades to head on SQLite and PostgreSQL, keeps every row and every value, and the
service reads them back over real HTTP (the token written at the old revision still signs in)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from gpufleet.adapters.sql import migrate
from gpufleet.service.auth import hash_token
from tests.integration.conftest import BACKENDS, NOW_S, Database, ServerFactory, _make_database


def _older_revisions() -> list[str]:
    cfg = Config()
    cfg.set_main_option("script_location", migrate.SCRIPT_LOCATION)
    script = ScriptDirectory.from_config(cfg)
    revs = [s.revision for s in script.walk_revisions()]  # head first
    return list(reversed(revs[1:]))


OLDER = _older_revisions()
TOKEN = "gft_review-migrate-token-written-at-an-old-revision"
T0 = NOW_S - 86_400

# Rows under head's column names, in foreign-key order; at an older revision only the tables and columns it has are
# written (every column added later is nullable). Ids are not the built-in catalog's, so 0002's seeding never clashes.
ROWS: list[tuple[str, dict[str, Any]]] = [
    ("providers", {"id": "rv-prov", "name": "Review Cloud", "kind": "neocloud"}),
    ("regions", {"id": "rv-region", "provider_id": "rv-prov", "geo": "eu"}),
    (
        "skus",
        {
            "id": "rv-sku",
            "name": "Review GPU",
            "memory_gb": 80,
            "gpus_per_node": 8,
            "cpu_per_node": 96,
            "mem_gb_per_node": 1024,
            "interconnect": "nvlink",
            "relative_throughput": 1.25,
        },
    ),
    (
        "pools",
        {
            "id": "rv-prov/rv-region/rv-sku/reserved",
            "provider_id": "rv-prov",
            "region_id": "rv-region",
            "sku_id": "rv-sku",
            "tier": "reserved",
            "price_uusd_per_gpu_h": 2_123_457,
            "term_months": 12,
            "lead_time_s": 86_400,
            "quota_gpus": 64,
            "allocated_gpus": 8,
            "preemption_rate_per_h": 0.0,
        },
    ),
    ("teams", {"id": "team-rv", "name": "Review team"}),
    ("tenants", {"id": "tenant-rv", "name": "Review tenant", "team_id": "team-rv"}),
    ("clusters", {"id": "c-rv", "name": "Review cluster", "region_id": "rv-region"}),
    (
        "nodes",
        {"id": "node-rv-1", "cluster_id": "c-rv", "sku_id": "rv-sku", "gpus_total": 8, "allocations_json": "[]"},
    ),
    (
        "workloads",
        {
            "id": "wl-rv",
            "name": "llm-serve",
            "image": "registry.example/llm:1",
            "kind": "serving",
            "cpu": 12.5,
            "mem_gb": 96.0,
            "gpus": 2,
            "gpu_sku": "rv-sku",
            "min_replicas": 1,
            "max_replicas": 4,
            "scale_metric": "rps",
            "target_rps": 40.0,
            "slo_s": 0.5,
            "max_concurrency": 8,
            "budget_cents_day": 123_456,
            "team_id": "team-rv",
            "tenant_id": "tenant-rv",
            "priority": "critical",
            "checkpoint_interval_s": None,
            "version": 3,
            "created_at_s": T0,
        },
    ),
    (
        "rightsizing_changes",
        {
            "id": "chg-rv",
            "workload_id": "wl-rv",
            "cpu": 8.0,
            "mem_gb": 64.0,
            "ticket": "OPS-1",
            "status": "pending",
            "requested_by": "carol",
            "created_at_s": T0,
        },
    ),
    (
        "reservations",
        {
            "id": "res-rv",
            "pool_id": "rv-prov/rv-region/rv-sku/reserved",
            "sku_id": "rv-sku",
            "region_id": "rv-region",
            "units": 16,
            "start_s": NOW_S + 7 * 86_400,
            "term_months": 12,
            "price_uusd_per_gpu_h": 2_123_457,
            "est_cost_cents": 29_761_373_50,
            "status": "pending_approval",
            "version": 2,
            "approvals_required": 2,
            "created_by": "alice",
            "created_at_s": T0,
            "budget_code": "ML-2026",
            "idempotency_key": "res-rv-key",
            "provider_order_id": None,
            "client_key": "client-key-1",
            "request_fingerprint": "f" * 64,
            "group_id": None,
        },
    ),
    (
        "reservation_approvals",
        {"reservation_id": "res-rv", "user_id": "bob", "role": "finops_admin", "budget_code": "ML-2026", "at_s": T0},
    ),
    (
        "audit_events",
        {
            "at_s": T0,
            "actor": "alice",
            "action": "reservation.created",
            "entity": "reservation",
            "entity_id": "res-rv",
            "detail_json": json.dumps({"units": 16}),
        },
    ),
    (
        "audit_events",
        {
            "at_s": T0,
            "actor": "carol",
            "action": "workload.rightsizing_requested",
            "entity": "workload",
            "entity_id": "wl-rv",
            "detail_json": json.dumps({"change_id": "chg-rv", "cpu": 8.0, "mem_gb": 64.0}),
        },
    ),
    (
        "api_tokens",
        {
            "id": "tok-rv",
            "token_hash": hash_token(TOKEN),
            "user_id": "dave",
            "role": "ml_platform_admin",
            "team_id": None,
            "created_at_s": T0,
            "revoked": False,
            "expires_at_s": None,
        },
    ),
    (
        "utilization",
        {
            "source": "dcgm",
            "bucket_start_s": T0,
            "workload_id": "wl-rv",
            "bucket_s": 3600,
            "team_id": "team-rv",
            "sku_id": "rv-sku",
            "gpus_allocated": 2.0,
            "gpu_util": 0.375,
            "queue_wait_s": 1.5,
            "pool_id": "rv-prov/rv-region/rv-sku/reserved",
        },
    ),
    (
        "sim_provider_orders",
        {
            "idempotency_key": "sim-rv",
            "order_id": "order-rv",
            "sku_id": "rv-sku",
            "region_id": "rv-region",
            "units": 8,
            "term_months": 12,
            "start_s": NOW_S,
            "created_at_s": T0,
        },
    ),
    (
        "pool_signals",
        {"pool_id": "rv-prov/rv-region/rv-sku/reserved", "stockout": True, "queue_wait_s": 600, "updated_at_s": T0},
    ),
    (
        "forecast_issues",
        {
            "series_id": "rv-sku",
            "model": "seasonal",
            "issued_at_s": T0,
            "start_s": T0,
            "step_s": 3600,
            "scale": 1.0,
            "quantiles_json": "[0.5]",
            "values_json": "[[1.0, 2.0]]",
        },
    ),
    (
        "team_budgets",
        {
            "team_id": "team-rv",
            "limit_cents": 5_000_000,
            "period": "month",
            "enforce": True,
            "alert_at_json": "[0.8]",
            "version": 1,
            "updated_at_s": T0,
            "updated_by": "erin",
        },
    ),
    (
        "budget_commitments",
        {
            "team_id": "team-rv",
            "created_at_s": T0,
            "start_s": T0,
            "end_s": NOW_S + 86_400,
            "rate_uusd_per_h": 4_246_914,
            "action": "admitted",
            "pool_id": "rv-prov/rv-region/rv-sku/reserved",
        },
    ),
    (
        "planned_runs",
        {
            "id": "run-rv",
            "name": "pretrain",
            "team_id": "team-rv",
            "sku_id": "rv-sku",
            "region_id": "rv-region",
            "gpus": 64,
            "start_s": NOW_S + 30 * 86_400,
            "duration_s": 14 * 86_400,
            "probability": 0.8,
            "registered_s": T0,
            "created_by": "frank",
            "cancelled_at_s": None,
            "cancelled_by": None,
        },
    ),
    (
        "capacity_block_purchases",
        {
            "id": "cbp-rv",
            "offering_id": "cb-offer-1",
            "region_id": "us-east-1",
            "sku_id": "rv-sku",
            "gpus": 8,
            "duration_h": 24,
            "start_after_s": NOW_S,
            "end_before_s": NOW_S + 7 * 86_400,
            "instance_type": "p5.48xlarge",
            "availability_zone": "us-east-1a",
            "instance_count": 1,
            "start_s": NOW_S + 86_400,
            "end_s": NOW_S + 2 * 86_400,
            "upfront_fee_uusd": 750_123_456,
            "currency": "USD",
            "budget_code": "ML-2026",
            "status": "pending_approval",
            "version": 1,
            "approvals_required": 2,
            "created_by": "alice",
            "created_at_s": T0,
            "purchase_key": "gpufleet-cb-cb-offer-1",
            "capacity_reservation_id": None,
        },
    ),
    (
        "capacity_block_approvals",
        {"purchase_id": "cbp-rv", "user_id": "bob", "role": "finops_admin", "budget_code": "ML-2026", "at_s": T0},
    ),
]


def _write_rows(db: Database) -> list[tuple[str, dict[str, Any]]]:
    """The rows the store's revision has room for: (table, the values written)."""
    insp = inspect(db.engine)
    tables = set(insp.get_table_names())
    written: list[tuple[str, dict[str, Any]]] = []
    with db.engine.begin() as conn:
        for table, row in ROWS:
            if table not in tables:
                continue
            have = {c["name"] for c in insp.get_columns(table)}
            values = {k: v for k, v in row.items() if k in have}
            cols = ", ".join(values)
            conn.execute(text(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(':' + k for k in values)})"), values)
            written.append((table, values))
    return written


def _missing(db: Database, written: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The written rows the store no longer holds with the same values."""
    missing: list[dict[str, Any]] = []
    with db.engine.connect() as conn:
        for table, values in written:
            rows = [dict(r) for r in conn.execute(text(f"SELECT {', '.join(values)} FROM {table}")).mappings()]
            if values not in rows:
                missing.append({"table": table, "wrote": values, "holds": rows})
    return missing


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_old_store(backend: str, tmp_path: Path, pg_reason: str | None) -> Iterator[Any]:
    made: list[Iterator[Database]] = []

    def make(revision: str) -> Database:
        gen = _make_database(backend, tmp_path, pg_reason, revision=revision)
        made.append(gen)
        return next(gen)

    yield make
    for gen in made:
        for _ in gen:  # runs the fixture's teardown (drops the PostgreSQL schema)
            pass


@pytest.mark.parametrize("revision", OLDER)
def test_a_store_filled_at_an_older_revision_upgrades_with_every_row_and_the_service_reads_them(
    revision: str, make_old_store: Any, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: on SQLite a migration that rebuilds a table (``batch_alter_table`` copies it,
    drops the old one and renames the copy: 0003 does so to ``reservations`` for its unique constraint) dropped the
    old table while ``PRAGMA foreign_keys`` was on (the engine turns it on for every connection), so a store at 0001
    or 0002 holding a reservation with an approval could never be upgraded: ``db upgrade`` failed with "FOREIGN KEY
    constraint failed" and the store stayed at its old revision (PostgreSQL alters in place and was not affected)."""
    db = make_old_store(revision)
    assert migrate.current_revision(db.engine) == revision
    written = _write_rows(db)
    assert {"reservations", "reservation_approvals", "workloads", "rightsizing_changes"} <= {t for t, _ in written}

    assert migrate.upgrade(db.engine) == (revision, migrate.head_revision(db.engine))

    assert _missing(db, written) == []  # every row, every value (money to the micro-dollar)
    server = make_server(db)
    with server.client("finops_admin", "reader") as c:
        r = c.get("/v1/reservations/res-rv")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["status"], body["units"], body["approvals_required"]) == ("pending_approval", 16, 2)
        assert [a["user_id"] for a in body["approvals"]] == ["bob"]
        assert body["price_usd_per_gpu_h"] == pytest.approx(2.123457)
        w = c.get("/v1/workloads/wl-rv")
        assert w.status_code == 200, w.text
        assert (w.json()["gpus"], w.json()["team"], w.json()["budget_usd_day"]) == (2, "team-rv", 1234.56)
        ch = c.get("/v1/changes/chg-rv")
        assert ch.status_code == 200, ch.text
        audit = c.get("/v1/audit", params={"entity_id": "res-rv"})
        assert audit.status_code == 200, audit.text
        assert any(e["action"] == "reservation.created" for e in audit.json()), audit.text
    old_token = {"Authorization": f"Bearer {TOKEN}"}  # a token from before 0005 has no expiry: it still signs in
    with server.client() as c:
        assert c.get("/v1/workloads/wl-rv", headers=old_token).status_code == 200


def test_sqlite_upgrade_checks_every_reference_before_it_commits(tmp_path: Path, pg_reason: str | None) -> None:
    """Foreign keys are not enforced while SQLite's migrations rebuild tables: a reference left broken (here one the
    store already held, written without enforcement) refuses the upgrade with the table named, and nothing changes."""
    gen = _make_database("sqlite", tmp_path, pg_reason, revision="0002")
    db = next(gen)
    raw = sqlite3.connect(tmp_path / "gpufleet.db")
    raw.execute("PRAGMA foreign_keys=OFF")
    raw.execute("INSERT INTO reservation_approvals VALUES ('no-such-reservation', 'bob', 'finops_admin', 'b', 0)")
    raw.commit()
    raw.close()
    with pytest.raises(migrate.DatabaseNotMigrated, match="reservation_approvals"):
        migrate.upgrade(db.engine)
    assert migrate.current_revision(db.engine) == "0002"
    assert "client_key" not in {c["name"] for c in inspect(db.engine).get_columns("reservations")}
    for _ in gen:
        pass
