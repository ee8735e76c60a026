"""Engine bootstrap. Nothing is built at import time: call :func:`make_engine` from the one bootstrap.

SQLite is serialized properly: every write transaction starts with ``BEGIN IMMEDIATE`` (takes the write lock
up front, so two writers never deadlock on a lock upgrade) and waits up to ``busy_timeout_s`` for it; reads use
a plain deferred ``BEGIN`` and, in WAL mode, never block writers. PostgreSQL uses row locks
(``SELECT ... FOR UPDATE``) and conditional updates instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection

WRITE_OPTION = "gpufleet_write"


def make_engine(url: str, *, busy_timeout_s: float = 30.0, pool_size: int = 10) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": busy_timeout_s, "check_same_thread": False})
        _serialize_sqlite(engine, busy_timeout_s)
        return engine
    return create_engine(url, pool_size=pool_size, max_overflow=2 * pool_size, pool_timeout=30)


def writer(engine: Engine) -> Engine:
    """The same engine, marked so that SQLite write transactions take the lock at BEGIN."""
    return engine.execution_options(**{WRITE_OPTION: True})


def _serialize_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own BEGIN handling is disabled so that the "begin" hook below decides.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def safe_url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)
