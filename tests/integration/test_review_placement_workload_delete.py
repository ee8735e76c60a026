"""Deleting a workload while a rightsizing change for it is being recorded (``DELETE /v1/workloads/{id}`` against
``POST /v1/workloads/{id}/rightsizing:apply``) on PostgreSQL. The house rule: a 4xx problem or success, never a
500, and no change request left naming a deleted workload. The interleavings are made deterministic by holding the
other side's transaction open (the exact statements the other request runs) until the request waits on it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import text

from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("database", ["postgres"], indirect=True)]


def _workload(server: LiveServer) -> str:
    with server.client("ml_platform_admin", "bob") as c:
        if c.get("/v1/teams/t-wl").status_code == 404:
            assert c.post("/v1/teams", json={"id": "t-wl", "name": "wl"}).status_code == 201
            assert c.post("/v1/tenants", json={"id": "t-wl-p", "name": "p", "team_id": "t-wl"}).status_code == 201
        body = {"name": "w", "image": "r/x:1", "gpus": 1, "gpu_sku": "h100_80gb", "team": "t-wl"}
        r = c.post("/v1/workloads", json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["workload_id"])


def _in_thread(server: LiveServer, method: str, path: str, **kw: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        with server.client("ml_platform_admin", "bob") as c:
            r = c.request(method, path, **kw)
            out.update(status=r.status_code, body=r.text)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _wait_for_lock_wait(database: Database, like: str) -> None:
    deadline = time.monotonic() + 10
    with database.engine.execution_options(isolation_level="AUTOCOMMIT").connect() as probe:  # a fresh view per poll
        while not probe.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE :q"),
            {"q": like},
        ).scalar_one():
            assert time.monotonic() < deadline, f"no request waited on a lock ({like})"
            time.sleep(0.02)


def _changes(database: Database, wid: str) -> int:
    with database.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM rightsizing_changes WHERE workload_id = :w"),
                                {"w": wid}).scalar_one())  # fmt: skip


def test_delete_waits_for_a_change_being_recorded_and_removes_it(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: WorkloadService.delete listed the workload's change requests without locking the
    workload, so a change committed meanwhile made its DELETE fail on the foreign key: a 500 (IntegrityError)."""
    server = make_server(database)
    wid = _workload(server)
    with database.engine.connect() as other:  # the transaction of a rightsizing:apply, before its commit
        other.execute(text(
            "INSERT INTO rightsizing_changes (id, workload_id, cpu, mem_gb, ticket, status, requested_by, "
            "created_at_s) VALUES ('chg-race', :w, 4, 32, 'OPS-1', 'pending', 'ann', :now)"
        ), {"w": wid, "now": NOW_S})  # fmt: skip
        t, out = _in_thread(server, "DELETE", f"/v1/workloads/{wid}")
        _wait_for_lock_wait(database, "%workload%")
        other.commit()
    t.join(30)
    assert out["status"] == 204, out
    assert _changes(database, wid) == 0


def test_a_change_for_a_workload_being_deleted_is_a_404(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: recording a rightsizing change read the workload without holding it, so a delete
    committed meanwhile made the change's INSERT fail on the foreign key: a 500 instead of the workload's 404."""
    server = make_server(database)
    wid = _workload(server)
    with database.engine.connect() as other:  # the transaction of a DELETE /v1/workloads/{id}, before its commit
        other.execute(text("SELECT id FROM workloads WHERE id = :w FOR UPDATE"), {"w": wid})
        other.execute(text("DELETE FROM rightsizing_changes WHERE workload_id = :w"), {"w": wid})
        other.execute(text("DELETE FROM workloads WHERE id = :w"), {"w": wid})
        t, out = _in_thread(server, "POST", f"/v1/workloads/{wid}/rightsizing:apply",
                            json={"cpu": 4, "mem_gb": 32, "ticket": "OPS-2"})  # fmt: skip
        _wait_for_lock_wait(database, "%workload%")
        other.commit()
    t.join(30)
    assert out["status"] == 404, out
    assert _changes(database, wid) == 0
