"""Engine bootstrap. Nothing is built at import time: call :func:`make_engine` from the one bootstrap.

SQLite is serialized properly: every write transaction starts with ``BEGIN IMMEDIATE`` (takes the write lock
up front, so two writers never deadlock on a lock upgrade) and waits up to ``busy_timeout_s`` for it; reads use
a plain deferred ``BEGIN`` and, in WAL mode, never block writers. PostgreSQL uses row locks
(``SELECT ... FOR UPDATE``) and conditional updates instead.

Timeouts (a database that stops answering must not hang the service): ``connect_timeout_s`` bounds opening a
connection (libpq ``connect_timeout``) and waiting for a free pooled one; ``statement_timeout_s`` bounds one
statement (PostgreSQL ``statement_timeout``, lock waits included; on SQLite a progress handler interrupts a
statement past it, and ``busy_timeout_s`` bounds the wait for the write lock). TCP keepalives and libpq's
``tcp_user_timeout`` drop a connection whose server host vanished. :func:`unavailable_reason` tells an
availability failure (answered 503 + Retry-After) from a bug (500).
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import Connection

WRITE_OPTION = "gpufleet_write"
# an execution option: statements on this connection run without the statement timeout (the schema migrations)
UNBOUNDED_OPTION = "gpufleet_unbounded"


_STATEMENT_DEADLINE = "gpufleet_statement_deadline"


# an engine's (connect, statement) timeouts, for a session opened beside its pool (the leader's lock session)
TIMEOUTS: weakref.WeakKeyDictionary[Engine, tuple[float, float]] = weakref.WeakKeyDictionary()


def timeouts_of(engine: Engine) -> tuple[float, float]:
    """The (connect, statement) timeouts :func:`make_engine` gave ``engine`` (its defaults for any other)."""
    return TIMEOUTS.get(engine, (5.0, 30.0))


def make_engine(
    url: str,
    *,
    busy_timeout_s: float = 30.0,
    pool_size: int = 10,
    connect_timeout_s: float = 5.0,
    statement_timeout_s: float = 30.0,
) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": busy_timeout_s, "check_same_thread": False})
        _serialize_sqlite(engine, busy_timeout_s)
        _sqlite_statement_timeout(engine, statement_timeout_s)
        return engine
    connect_args: dict[str, Any] = {
        "connect_timeout": max(1, math.ceil(connect_timeout_s)),  # libpq takes whole seconds (>= 2 effective)
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": int(max(connect_timeout_s, statement_timeout_s) * 1000),
    }
    engine = create_engine(
        url, pool_size=pool_size, max_overflow=2 * pool_size, pool_timeout=connect_timeout_s, connect_args=connect_args
    )
    TIMEOUTS[engine] = (connect_timeout_s, statement_timeout_s)
    timeout_ms = int(statement_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET statement_timeout = {timeout_ms}")
        dbapi_conn.commit()

    return engine


def _sqlite_statement_timeout(engine: Engine, statement_timeout_s: float) -> None:
    """Interrupt a SQLite statement that runs past ``statement_timeout_s`` (SQLite has no such setting: a progress
    handler, called every few thousand VM steps, compares the clock with a deadline set before each statement)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        deadline = [math.inf]
        record.info[_STATEMENT_DEADLINE] = deadline
        dbapi_conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline[0] else 0, 10_000)

    @event.listens_for(engine, "before_cursor_execute")
    def _arm(conn: Connection, *_args: Any) -> None:
        deadline = conn.info.get(_STATEMENT_DEADLINE)
        if deadline is not None:
            unbounded = conn.get_execution_options().get(UNBOUNDED_OPTION)
            deadline[0] = math.inf if unbounded else time.monotonic() + statement_timeout_s


_SQLITE_UNAVAILABLE = ("database is locked", "unable to open database", "disk i/o error", "interrupted", "busy")


def unavailable_reason(error: BaseException) -> str | None:
    """A short reason when ``error`` means the database is unreachable, overloaded or too slow (connection refused
    or timed out, pool exhausted, statement timeout, SQLite lock wait exhausted), else None (a bug: a 500)."""
    if isinstance(error, exc.TimeoutError):
        return "no database connection free within the connect timeout"
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return "database connection lost"
    if isinstance(error, exc.OperationalError):
        orig = error.orig
        first = (str(orig).strip().splitlines() or [type(orig).__name__])[0][:200]
        if type(orig).__module__.startswith("psycopg"):
            return f"database unavailable: {type(orig).__name__}: {first}"
        if any(k in first.lower() for k in _SQLITE_UNAVAILABLE):
            return f"database unavailable: {first}"
    return None


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
        cur.execute("PRAGMA recursive_triggers=ON")  # REPLACE's implicit delete fires DELETE triggers too
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def safe_url(engine: Engine) -> str:
    """The engine's URL to show: the password masked, given as ``user:password@`` or as a ``password`` query
    argument (libpq takes both)."""
    url = engine.url
    hidden = {k: "***" for k in url.query if k.lower() == "password"}
    if hidden:
        url = url.update_query_dict(hidden)
    return url.render_as_string(hide_password=True)
