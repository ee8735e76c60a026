"""Which process runs the reconciler and talks to the provider: the leader.

Several API processes may serve one PostgreSQL database. Reservation approvals are taken by any of them, but
provider submission and the reconciler run in exactly one: the holder of a PostgreSQL session-level advisory
lock (``pg_try_advisory_lock``), keyed by the schema (``current_schema()``) so that two gpufleet installations
in one database elect independently. The lock lives as long as the leader's dedicated database session, so a
leader that dies (even by SIGKILL) frees it as soon as PostgreSQL sees the session close; a follower polls
every ``poll_s`` and takes over. On SQLite the single serving process is the leader (:class:`SoleLeader`).

Contract: :meth:`is_leader` is cheap (cached, re-checked at most every ``poll_s``) and may be stale by up to
``poll_s``; correctness does not rest on it. Submission is idempotent (a fixed key per reservation, a
conditional update to record the order), so a stale leader overlapping its successor for one poll interval
can at worst send the same key twice, which the provider deduplicates. The lock removes the duplicated work
and the races, not the safety net.

Fencing: the lock alone cannot stop a write already under way (a leader stuck on a row lock or paused inside a
transaction commits whenever it resumes, whoever leads by then). Each process that takes the lock bumps the store's
fencing epoch (``leader_fence``, migration 0015) on its lock session and keeps the value (:meth:`Leadership.epoch`);
the reconciler's writes check it in their own transaction before committing (``fenced``, service/uow.py), so a
stale leader's write rolls back instead of landing beside its successor's. Taking the lead fails (and is retried at
the next poll) when the bump cannot be made within the statement timeout.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, create_engine, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from gpufleet.adapters.sql.engine import timeouts_of
from gpufleet.adapters.sql.models import ReservationRow
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.service.reservations import ReservationService
from gpufleet.service.uow import UnitOfWork

log = logging.getLogger("gpufleet.leader")

LOCK_NAME = "gpufleet-leader:"
# TCP keepalives on the lock session, both ends: a leader whose host vanishes without closing the socket is
# noticed by PostgreSQL after about idle + interval * count = 10 + 5 * 3 = 25 s (instead of hours).
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3
_BUMP_EPOCH = (
    "INSERT INTO leader_fence (id, epoch, holder) VALUES (1, 1, :holder) ON CONFLICT (id) DO UPDATE "
    "SET epoch = leader_fence.epoch + 1, holder = EXCLUDED.holder RETURNING epoch"
)


class Leadership(Protocol):
    """Leader election as the service sees it."""

    def is_leader(self) -> bool:
        """Whether this process leads (cached; re-checked when older than the poll interval)."""
        ...

    def refresh(self) -> bool:
        """Try to take the lead, or confirm it is still held; returns the outcome. Blocking (database I/O)."""
        ...

    def close(self) -> None:
        """Give up the lead (if held) and release the session."""
        ...

    def epoch(self) -> int | None:
        """The fencing epoch this process took with its latest lead (kept once the lead is lost, so that a write
        still under way is refused); None: no fencing (SQLite's sole process, a store without ``leader_fence``)."""
        ...


class SoleLeader:
    """The embedded default (SQLite, one process): this process always leads."""

    def is_leader(self) -> bool:
        return True

    def refresh(self) -> bool:
        return True

    def close(self) -> None:
        return None

    def epoch(self) -> int | None:
        return None


class AdvisoryLockLeader:
    """Leadership = holding a PostgreSQL advisory lock on a dedicated session (outside the engine's pool).

    ``clock_s`` is a monotonic clock in seconds (injected for tests). Thread-safe.
    """

    def __init__(self, engine: Engine, *, poll_s: float = 1.0, clock_s: Callable[[], float] = time.monotonic) -> None:
        connect_s, statement_s = timeouts_of(engine)  # the service's own: a silent database is an answer in time
        self._statement_ms = int(statement_s * 1000)
        self._statement_s = statement_s
        self._wait_s = connect_s + statement_s
        self._engine = create_engine(
            engine.url,
            poolclass=NullPool,
            connect_args={
                "connect_timeout": max(1, math.ceil(connect_s)),
                "tcp_user_timeout": int(max(connect_s, statement_s) * 1000),
                "keepalives": 1,
                "keepalives_idle": KEEPALIVE_IDLE_S,
                "keepalives_interval": KEEPALIVE_INTERVAL_S,
                "keepalives_count": KEEPALIVE_COUNT,
                "application_name": leader_application_name(),
            },
        )
        self._poll_s = poll_s
        self._clock_s = clock_s
        self._conn: Connection | None = None
        self._leader = False
        self._epoch: int | None = None
        self._checked_at_s: float | None = None
        self._mutex = threading.Lock()  # one refresh (or close) at a time on the lock session
        self._closes = 0  # close() calls: a refresh during which it moved gives the lead up at its end
        self._closes_lock = threading.Lock()

    def is_leader(self) -> bool:
        checked = self._checked_at_s
        if checked is None or self._clock_s() - checked >= self._poll_s:
            return self.refresh()
        return self._leader

    def refresh(self) -> bool:
        """Bounded: the lock session has the service's connect and statement timeouts, and a caller that finds
        another refresh under way waits at most those before answering "not leading" (never hangs a request)."""
        if not self._mutex.acquire(timeout=self._wait_s):
            return False
        try:
            closes = self._closes
            leading = self._refresh()
            if self._closes != closes:  # close() was called meanwhile (and may have given up waiting): no lead
                self._drop()  # closing the session releases the lock
                return False
            return leading
        finally:
            self._mutex.release()

    def _refresh(self) -> bool:
        was = self._leader
        try:
            conn = self._session()
            if self._leader:
                self._bounded(conn, "SELECT 1")  # the lock lives exactly as long as this session
            else:
                got = self._bounded(
                    conn, "SELECT pg_try_advisory_lock(hashtextextended(:name || current_schema(), 0))", name=LOCK_NAME
                )
                if got:  # a lead of its own: a new epoch, which fences out the writes of the previous leader
                    self._epoch = self._take_epoch(conn)
                self._leader = bool(got)
        except SQLAlchemyError as exc:  # the session is gone, and the lock with it
            log.warning("leader session lost: %s", type(exc).__name__)
            self._drop()
        self._checked_at_s = self._clock_s()
        if self._leader != was:
            log.info("leadership %s", "acquired" if self._leader else "lost")
        return self._leader

    def epoch(self) -> int | None:
        return self._epoch

    def _take_epoch(self, conn: Connection) -> int | None:
        """Bump the store's fencing epoch (waits for a write that passed its check to commit: service/uow.py) and
        return it; None on a store without ``leader_fence`` (not migrated: the service refuses it anyway)."""
        if not self._bounded(conn, "SELECT to_regclass('leader_fence') IS NOT NULL"):
            return None
        epoch = int(self._bounded(conn, _BUMP_EPOCH, holder=leader_application_name()))
        log.info("leader fencing epoch %d", epoch)
        return epoch

    def close(self) -> None:
        """Give up the lead at once (:meth:`is_leader` answers False from now on until a refresh takes it again) and
        close the lock session. A refresh under way (it holds the mutex: a slow database) is waited for at most the
        connect + statement timeouts; past that the session it is using is left to it: it closes the session itself
        when it ends and answers False (it does not keep, nor take, the lead)."""
        with self._closes_lock:
            self._closes += 1
        leading, self._leader = self._leader, False
        if not self._mutex.acquire(timeout=self._wait_s):  # a refresh stuck on a silent database ends within this
            log.warning("leader close: a refresh is still under way; it gives the lead up when it ends")
            return
        try:
            if leading and self._conn is not None:
                with contextlib.suppress(SQLAlchemyError):  # release now: the session ends asynchronously
                    self._bounded(self._conn, "SELECT pg_advisory_unlock_all()")
            self._drop()
            self._engine.dispose()
        finally:
            self._mutex.release()

    def _session(self) -> Connection:
        if self._conn is None:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text(f"SET tcp_keepalives_idle = {KEEPALIVE_IDLE_S}"))
            conn.execute(text(f"SET tcp_keepalives_interval = {KEEPALIVE_INTERVAL_S}"))
            conn.execute(text(f"SET tcp_keepalives_count = {KEEPALIVE_COUNT}"))
            conn.execute(text(f"SET statement_timeout = {self._statement_ms}"))
            self._conn = conn
        return self._conn

    def _bounded(self, conn: Connection, sql: str, **params: Any) -> Any:
        """One statement on the lock session, never longer than the statement timeout (+1 s): a database that
        went silent never sees PostgreSQL's own ``statement_timeout``, and the socket still looks alive to the
        client (nothing times out on its side), so a timer shuts the session's socket down; the statement then
        fails, the session is dropped and with it the lead (it could not be confirmed)."""
        fd = _socket_of(conn)
        timer = threading.Timer(self._statement_s + 1.0, _shut, (fd,))
        timer.daemon = True
        timer.start()
        try:
            return conn.execute(text(sql), params).scalar_one()
        finally:
            timer.cancel()

    def _drop(self) -> None:
        self._leader = False
        if self._conn is not None:
            with contextlib.suppress(SQLAlchemyError):
                self._conn.close()  # closing the session releases the advisory lock
            self._conn = None


def _socket_of(conn: Connection) -> int | None:
    pgconn = getattr(conn.connection.dbapi_connection, "pgconn", None)  # psycopg 3's libpq connection
    return None if pgconn is None else int(pgconn.socket)


def _shut(fd: int | None) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        s = socket.socket(fileno=os.dup(fd))
        try:
            s.shutdown(socket.SHUT_RDWR)
        finally:
            s.close()


def leader_application_name() -> str:
    """The lock session's ``application_name``: ``gpufleet-leader <host>:<pid>`` (<= 63 bytes), so that
    ``pg_stat_activity`` joined with ``pg_locks`` shows which pod/process leads."""
    return f"gpufleet-leader {socket.gethostname()[:32]}:{os.getpid()}"


def election_for(engine: Engine, *, poll_s: float) -> Leadership:
    """The advisory lock on PostgreSQL; the sole process leads on SQLite."""
    if engine.dialect.name == "postgresql":
        return AdvisoryLockLeader(engine, poll_s=poll_s)
    return SoleLeader()


def submit_approved(engine: Engine, reservations: ReservationService) -> list[str]:
    """The leader's quick pass (every poll): submit reservations approved on any process. Returns their ids."""
    with UnitOfWork(engine, write=False) as uow:
        ids = uow.session.scalars(
            select(ReservationRow.id)
            .where(ReservationRow.status == ReservationStatus.APPROVED.value)
            .order_by(ReservationRow.id)
        ).all()
    for rid in ids:
        reservations.submit(rid, actor_id="leader")
    return list(ids)
