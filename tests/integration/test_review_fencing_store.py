"""Review (fencing): the store under the controller and the reconciler: the schema revision the controller writes
at once the store answers again, and ids that outgrow 32 bits on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.store_link import StoreLink
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.migrate import DatabaseNotMigrated
from gpufleet.adapters.sql.models import NodeRow, UtilizationRow
from gpufleet.cli.cmd_controller import _usage_sink
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.schedule.table import NodeSpec, PodRequest
from gpufleet.service.uow import UnitOfWork
from tests.integration.conftest import NOW_S, Database, _make_database

OLD = "0012_utilization_unmeasured"  # an older revision whose tables the inventory sync writes all exist
NEWER = "0099_written_by_a_newer_gpufleet"

OBS = Observation(
    NOW_S,
    (ObservedNode(NodeSpec("e", 128_000, 1_024_000, 8), sku="NVIDIA-H100-80GB-HBM3", region="us-east-1",
                  capacity_type="on-demand"),),
    (ObservedPod(PodRequest("ns/t-0", 1000, 1024, 4, 1000), "ns", "t-0", "t-0", "Running", node="e",
                 owner_name="train"),),
)  # fmt: skip


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason)


def _store_comes_back(path: Path, revision: str) -> None:
    """The store appears at ``path`` (restored from a backup, or upgraded by a newer release meanwhile): migrated to
    ``revision`` (or to head and stamped with a revision this gpufleet does not ship), the cluster registered."""
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine, OLD if revision == OLD else "head")
    with engine.begin() as c:
        c.execute(text("INSERT INTO clusters (id, name, region_id) VALUES ('prod', 'prod', 'us-east-1')"))
        if revision == NEWER:
            c.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": NEWER})
    engine.dispose()


def _nodes(engine: Engine) -> int:
    with Session(engine) as s:
        return int(s.scalar(select(func.count()).select_from(NodeRow)) or 0)


@pytest.mark.parametrize("revision", [OLD, NEWER])
def test_the_controllers_store_link_checks_the_revision_once_the_store_answers(tmp_path: Path, revision: str) -> None:
    """Review (fixed), the defect: ``gpufleet controller --db`` checks the store's revision at start only when the
    store answers then (cmd_controller.py: a store that is down is a warning, and binding starts). Its inventory sync,
    NodePool limits and usage meter (store_link.py, the ingest sink) then wrote into whatever answered later, at any
    revision: here the store is down at the first sync and comes back at an older revision (a restored backup) or
    at one a newer release wrote, and the sync wrote its nodes into it. Now the store link checks the revision each
    time the store (re)answers and refuses to touch a store at another revision than head: the job fails, recorded
    in the controller's audit with the revision and the fix, and nothing is written."""
    path = tmp_path / "later" / "store.db"  # its folder does not exist yet: the store is down
    act = Actuator(None, dry_run=False)  # type: ignore[arg-type]  # records only: no API server here
    link = StoreLink(act, f"sqlite:///{path}", "prod", sync_every_s=60)
    try:
        link.tick(NOW_S, lambda: OBS)
        assert link.worker.wait_idle(10)
        assert act.audit[-1]["action"] == "inventory_sync" and act.audit[-1]["outcome"] == "failed", act.audit
        _store_comes_back(path, revision)
        link.tick(NOW_S + 60, lambda: OBS)
        assert link.worker.wait_idle(10)
        last = act.audit[-1]
        assert last["action"] == "inventory_sync" and last["outcome"] == "failed", last
        assert revision in str(last.get("error")) and "DatabaseNotMigrated" in str(last.get("error")), last
        assert _nodes(link.engine()) == 0  # nothing written into a store of another schema
    finally:
        link.stop()


def test_the_controllers_usage_sink_refuses_a_store_at_another_revision(tmp_path: Path) -> None:
    """Review (fixed), the same defect on the meter's sink (``_usage_sink``, the ingest use case on its own engine):
    it wrote the metered hours into a store at a revision this gpufleet does not ship. Now it checks the revision
    the first time it writes and again after any failure, and refuses (the meter keeps the hours it could not
    write, usage.py)."""
    path = tmp_path / "store.db"
    _store_comes_back(path, NEWER)
    sink = _usage_sink(f"sqlite:///{path}")
    record: dict[str, Any] = {"source": "gpufleet-meter", "bucket_start_s": NOW_S - 7200, "bucket_s": 3600,
                              "workload_id": "ns/train", "team_id": "team-a", "sku_id": "h100_80gb",
                              "pool_id": "aws/us-east-1/h100_80gb/on_demand", "gpus_allocated": 4.0, "gpu_util": 0.5}  # fmt: skip
    with pytest.raises(DatabaseNotMigrated, match=NEWER):
        sink([record])
    engine = make_engine(f"sqlite:///{path}")
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(UtilizationRow)) == 0
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("table", ["audit_events", "forecast_issues", "budget_commitments"])
def test_serial_ids_of_high_volume_tables_go_past_32_bits_on_postgres(pg_database: Database, table: str) -> None:
    """Review (fixed), the defect: ``audit_events.id`` (one row per write of every use case, and every metered hour,
    inventory sync and reconciler pass), ``forecast_issues.id`` (every forecast served) and
    ``budget_commitments.id`` (every admission against a budget) were ``INTEGER`` serials on PostgreSQL: after 2^31 - 1
    rows every insert fails ("integer out of range" / the sequence's maximum), and with ``audit_events`` every write of
    the service with it. Migration 0014 makes the columns and their sequences BIGINT (SQLite's INTEGER PRIMARY KEY is
    its 64-bit rowid already). Here the sequence is moved past 2^31 and one row is inserted."""
    database = pg_database
    with database.engine.begin() as c:
        seq = c.scalar(text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table})
        c.execute(text(f"ALTER SEQUENCE {seq} RESTART WITH {2**31 + 5}"))
    if table == "audit_events":
        with UnitOfWork(database.engine, write=True) as uow:
            uow.audit(at_s=NOW_S, actor="t", action="t.big", entity="t", entity_id="t")
            uow.commit()
    elif table == "forecast_issues":
        with database.engine.begin() as c:
            c.execute(text("INSERT INTO forecast_issues (series_id, model, issued_at_s, start_s, step_s, scale, "
                           "quantiles_json, values_json) VALUES ('s', 'm', 1, 1, 3600, 1.0, '[]', '[]')"))  # fmt: skip
    else:
        with database.engine.begin() as c:
            c.execute(text("INSERT INTO teams (id, name) VALUES ('team-big', 'big')"))
            c.execute(text("INSERT INTO budget_commitments (team_id, created_at_s, start_s, end_s, rate_uusd_per_h, "
                           "action) VALUES ('team-big', 1, 1, 2, 3, 'admit')"))  # fmt: skip
    with database.engine.connect() as c:
        assert c.scalar(text(f"SELECT max(id) FROM {table}")) == 2**31 + 5
        kinds = c.execute(
            text("SELECT c.data_type, s.data_type FROM information_schema.columns c "
                 "JOIN information_schema.sequences s ON s.sequence_schema = c.table_schema "
                 "AND s.sequence_name = :seq WHERE c.table_schema = current_schema() AND c.table_name = :t "
                 "AND c.column_name = 'id'"),
            {"t": table, "seq": seq.split(".")[-1]},
        ).one()  # fmt: skip
    assert tuple(kinds) == ("bigint", "bigint"), kinds
