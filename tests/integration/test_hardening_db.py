"""Issue 17 part B, the store's attacks on SQLite and PostgreSQL (each test is the attack; each failed on the main
before the fix): rewriting the audit log (7), a database that stops answering (8), a database that refuses
connections (11)."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.roles import role_names
from tests.integration.conftest import PG_ADMIN_URL, Database, ServerFactory, _make_database
from tests.integration.pg_pool import SchemaPool
from tests.integration.tcp_proxy import TcpProxy

PROBLEM = "application/problem+json"


class _Tracebacks(logging.Handler):
    """Every log record that carries a traceback (or is an error), from any logger, while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture
def tracebacks() -> Iterator[_Tracebacks]:
    h = _Tracebacks()
    root = logging.getLogger()
    old = {n: logging.getLogger(n).level for n in ("uvicorn.error", "gpufleet", "sqlalchemy.pool")}
    root.addHandler(h)
    for n in old:
        logging.getLogger(n).setLevel(logging.INFO)
    yield h
    root.removeHandler(h)
    for n, lvl in old.items():
        logging.getLogger(n).setLevel(lvl)


def _schema_of(db: Database) -> str:
    with db.engine.connect() as conn:
        return str(conn.execute(text("SELECT current_schema()")).scalar_one())


def _with_engine(db: Database, url: str | None = None, **timeouts: float) -> Database:
    url = url or db.url
    return Database(url, db.backend, make_engine(url, pool_size=2, **timeouts))  # type: ignore[arg-type]


def _assert_503(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith(PROBLEM) and int(r.headers["retry-after"]) > 0
    assert r.json()["status"] == 503


# ---- 7: the audit log is append-only for real -------------------------------------------------------------


SQLITE_REWRITES = [
    "INSERT OR REPLACE INTO audit_events (id, at_s, actor, action, entity, entity_id, detail_json) "
    "VALUES (1, 0, 'mallory', 'nothing.happened', 'team', 'x', '{}')",
    "REPLACE INTO audit_events (id, at_s, actor, action, entity, entity_id, detail_json) "
    "VALUES (1, 0, 'mallory', 'nothing.happened', 'team', 'x', '{}')",
    "INSERT INTO audit_events (id, at_s, actor, action, entity, entity_id, detail_json) "
    "VALUES (1, 0, 'mallory', 'x', 'team', 'x', '{}') ON CONFLICT(id) DO UPDATE SET actor = 'mallory'",
    "UPDATE audit_events SET actor = 'mallory' WHERE id = 1",
    "DELETE FROM audit_events",
]
PG_REWRITES = [
    "TRUNCATE audit_events",
    "DROP TRIGGER audit_no_update ON audit_events",
    "ALTER TABLE audit_events DISABLE TRIGGER ALL",
    "UPDATE audit_events SET actor = 'mallory'",
    "DELETE FROM audit_events",
    "INSERT INTO audit_events (id, at_s, actor, action, entity, entity_id, detail_json) "
    "VALUES (1, 0, 'mallory', 'x', 'team', 'x', '{}') ON CONFLICT (id) DO UPDATE SET actor = 'mallory'",
    "DROP TABLE audit_events",
    "CREATE OR REPLACE FUNCTION gpufleet_audit_append_only() RETURNS trigger AS $$ BEGIN RETURN NEW; END $$ "
    "LANGUAGE plpgsql",
]


def _refused(engine: Any, stmt: str) -> bool:
    try:
        with engine.begin() as conn:
            conn.execute(text(stmt))
    except DBAPIError:
        return True
    return False


def _service_login(db: Database) -> Database:
    """A login role that is a member of the store's service group only (as a deployment serves)."""
    schema = _schema_of(db)
    _audit, service = role_names("test", schema)
    login = f"{service}_login"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE ROLE "{login}" LOGIN'))
        conn.execute(text(f'GRANT "{service}" TO "{login}"'))
    admin.dispose()
    url = f"postgresql+psycopg://{login}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    return Database(url, "postgres", make_engine(url, pool_size=4))


def test_audit_log_cannot_be_rewritten(database: Database, make_server: ServerFactory) -> None:  # item 7
    served = database if database.backend == "sqlite" else _service_login(database)
    s = make_server(served)  # PostgreSQL: the API serves as the service role, and works
    with s.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/teams", json={"id": "t-audit", "name": "A"}).status_code == 201
        before = c.get("/v1/audit").json()
        assert before and before[0]["id"] == 1
        if database.backend == "sqlite":
            refused = {stmt.split(" (")[0]: _refused(database.engine, stmt) for stmt in SQLITE_REWRITES}
            assert all(refused.values()), refused
            raw = sqlite3.connect(database.url.removeprefix("sqlite:///"), isolation_level=None)
            try:  # a plain connection: recursive_triggers off (SQLite's default), the REPLACE is still refused
                assert raw.execute("PRAGMA recursive_triggers").fetchone() == (0,)
                with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                    raw.execute(SQLITE_REWRITES[0])
            finally:
                raw.close()
        else:
            refused = {stmt[:40]: _refused(served.engine, stmt) for stmt in PG_REWRITES}
            assert all(refused.values()), refused  # the service role cannot alter the log
            audit, _ = role_names("test", _schema_of(database))
            assert _refused(served.engine, f'SET ROLE "{audit}"')
            assert _refused(database.engine, "TRUNCATE audit_events")  # not even the owner: a trigger refuses
        assert c.post("/v1/teams", json={"id": "t-audit-2", "name": "B"}).status_code == 201  # INSERT still works
        after = c.get("/v1/audit").json()
        assert after[: len(before)] == before and len(after) > len(before)
    if served is not database:
        s.stop()
        served.engine.dispose()


# ---- 8: a database that stops answering ----------------------------------------------------------------------


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def _hold_lock(database: Database) -> tuple[Any, Any]:
    """Another session holds the write lock (SQLite) or an exclusive lock on ``teams`` (PostgreSQL)."""
    if database.backend == "sqlite":
        path = database.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        return conn, conn
    conn = database.engine.connect()
    tx = conn.begin()
    conn.execute(text("LOCK TABLE teams IN ACCESS EXCLUSIVE MODE"))
    return conn, tx


def test_locked_database_times_out_as_503_while_health_answers(
    database: Database, make_server: ServerFactory
) -> None:  # item 8 (statement / lock timeout)
    db = _with_engine(database, busy_timeout_s=3.0, statement_timeout_s=3.0, connect_timeout_s=2.0)
    s = make_server(db, worker_threads=2)
    token = s.token("ml_platform_admin", "bob")
    conn, tx = _hold_lock(database)
    try:
        with ThreadPoolExecutor(4) as pool, s.client() as anon:
            assert anon.get("/healthz").status_code == 200  # the client's connection is open before the clock runs
            hdr = {"Authorization": f"Bearer {token}"}
            writes: list[Future[httpx.Response]] = [
                pool.submit(httpx.post, f"{s.base_url}/v1/teams", json={"id": f"t{i}", "name": "x"}, headers=hdr,
                            timeout=30)
                for i in range(4)
            ]  # fmt: skip
            time.sleep(0.3)  # both API worker threads are now waiting on the lock
            health, took = _timed(lambda: anon.get("/healthz"))
            assert health.status_code == 200 and took < 2.0, (
                took
            )  # well inside the 3 s lock timeout, even on a loaded machine
            assert not any(f.done() for f in writes)  # answered while the writes wait on the lock
            for f in writes:
                r, took = _timed(f.result)
                _assert_503(r)  # bounded by the timeout, not hung
    finally:
        tx.rollback() if database.backend == "postgres" else conn.execute("ROLLBACK")
        conn.close()
    with s.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/teams", json={"id": "t-after", "name": "x"}).status_code == 201
        assert c.get("/readyz").status_code == 200
    db.engine.dispose()


@pytest.fixture
def pg_database(tmp_path: Path, pg_reason: str | None, pg_schemas: SchemaPool) -> Iterator[Database]:
    """A fresh PostgreSQL store only (a silent TCP path needs a database over TCP)."""
    yield from _make_database("postgres", tmp_path, pg_reason, schemas=pg_schemas)


@pytest.mark.postgres
def test_silent_database_keeps_health_and_readiness_answering(
    pg_database: Database, make_server: ServerFactory
) -> None:  # item 8 (a database that accepts and goes silent)
    database = pg_database
    proxy = TcpProxy("127.0.0.1", 5432)
    url = database.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    db = _with_engine(database, url, connect_timeout_s=2.0, statement_timeout_s=2.0)
    s = make_server(db, worker_threads=2, db_connect_timeout_s=2.0, db_statement_timeout_s=2.0)
    token = s.token("ml_platform_admin", "bob")
    hdr = {"Authorization": f"Bearer {token}"}
    proxy.freeze()
    with ThreadPoolExecutor(3) as pool, s.client() as anon:
        assert anon.get("/healthz").status_code == 200  # the client's connection is open before the clock runs
        hung = [pool.submit(httpx.get, f"{s.base_url}/v1/teams", headers=hdr, timeout=60) for _ in range(3)]
        time.sleep(0.5)
        health, took = _timed(lambda: anon.get("/healthz"))
        assert health.status_code == 200 and took < 2.0, (
            took
        )  # well inside the 3 s lock timeout, even on a loaded machine
        ready, took = _timed(lambda: anon.get("/readyz"))
        _assert_503(ready)
        assert took < 4.5, took  # at most the connect timeout (2 s) + 1 s, not forever
        # a request that needed a new connection got 503 after the connect timeout; one on a pooled connection
        # waits on the silent socket (no client-side timeout reaches it) until the connection dies...
        for f in hung:
            if f.done():
                _assert_503(f.result())
        proxy.refuse()
        for f in hung:  # ...then it answers 503 too: none hangs past the outage
            _assert_503(f.result(timeout=30))
    db.engine.dispose()


# ---- 11: a database that refuses connections ---------------------------------------------------------------


def _break(database: Database, tmp: Path) -> tuple[Database, Any]:
    """A served store, and a function that makes its database refuse every connection from then on."""
    if database.backend == "sqlite":
        path = Path(database.url.removeprefix("sqlite:///"))
        own = tmp / "store" / "gpufleet.db"
        own.parent.mkdir()
        shutil.copyfile(path, own)
        db = _with_engine(database, f"sqlite:///{own}")

        def refuse() -> None:
            db.engine.dispose()
            own.rename(own.with_suffix(".moved"))
            own.mkdir()  # a directory where the file was: "unable to open database file"

        return db, refuse
    proxy = TcpProxy("127.0.0.1", 5432)
    db = _with_engine(database, database.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"))
    return db, proxy.refuse


def test_refused_database_is_503_with_retry_after_and_no_traceback(
    database: Database, make_server: ServerFactory, tmp_path: Path, tracebacks: _Tracebacks
) -> None:  # item 11
    db, refuse = _break(database, tmp_path)
    s = make_server(db)
    token = s.token("finops_admin", "alice")
    refuse()
    hdr = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=s.base_url, headers=hdr, timeout=30) as c:
        for _ in range(2):  # the first finds a dead pooled connection (PostgreSQL), the second a refused connect
            _assert_503(c.get("/v1/teams"))
            _assert_503(c.post("/v1/teams", json={"id": "t1", "name": "x"}))
            _assert_503(c.get("/v1/audit"))
        assert c.get("/healthz").status_code == 200
        _assert_503(c.get("/readyz"))
    time.sleep(0.2)
    assert not tracebacks.records, [(r.name, r.getMessage()) for r in tracebacks.records]
    db.engine.dispose()


def test_migration_0009_goes_down_and_up_again(database: Database) -> None:
    """The audit guards and roles come off and back on without leftovers (a re-upgrade finds its roles)."""
    from alembic import command

    from gpufleet.adapters.sql import migrate

    cfg = migrate.alembic_config(database.engine)
    with database.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    assert migrate.current_revision(database.engine) == "0007"
    migrate.upgrade(database.engine)
    assert migrate.current_revision(database.engine) == migrate.head_revision(database.engine)
    stmt = SQLITE_REWRITES[0] if database.backend == "sqlite" else "TRUNCATE audit_events"
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO audit_events (id, at_s, actor, action, entity, entity_id, detail_json) "
                "VALUES (1, 0, 'a', 'b', 'c', 'd', '{}')"
            )
        )
    assert _refused(database.engine, stmt)
