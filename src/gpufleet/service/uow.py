"""Unit of work: one database transaction around one use case.

``UnitOfWork(engine, write=True)`` begins a write transaction (on SQLite ``BEGIN IMMEDIATE``: writers are
serialized); ``write=False`` a read. Leaving a write block without :meth:`commit` rolls back. ``lock(stmt)`` adds
``FOR UPDATE`` on PostgreSQL (row lock held to commit); on SQLite the immediate transaction already excludes
other writers, so it is a no-op there. ``insert(model)`` is the dialect's INSERT, whose ``on_conflict_do_update``
makes "set or replace" one statement that concurrent first writers cannot both fail. ``serialize(names)`` takes a
transaction-scoped advisory lock per name on PostgreSQL (SQLite: a no-op, writers are serialized already).

Fencing (PostgreSQL): inside ``with fenced(epoch)`` (the leader's reconciler pass, service/reconciler.py) every write
unit of work re-reads the leader's fencing epoch (``leader_fence``, bumped by each process that takes the lead:
service/leader.py) ``FOR SHARE`` just before it commits, and rolls back with :class:`FencedOut` when it is no longer
``epoch``. The share lock is held to the commit, so a new leader's bump waits for a write that passed the check:
either the stale leader's write commits before the new leader's epoch exists (and the new leader, which reads after
its bump, sees it), or it sees the new epoch and rolls back. A leader stuck on a lock inside a write can no longer
commit after another process took the lead and decided without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import Engine, Select, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.engine import timeouts_of, writer
from gpufleet.adapters.sql.models import AuditEventRow, LeaderFenceRow
from gpufleet.domain.errors import ConflictError

SelectT = TypeVar("SelectT", bound=Select[Any])

# the fencing epoch the write units of work of this thread (context) check before committing; None: not fenced
_FENCE: ContextVar[int | None] = ContextVar("gpufleet_fence", default=None)


class FencedOut(Exception):
    """A fenced write found a newer leader's epoch in the store: this process no longer leads; rolled back."""


@contextlib.contextmanager
def fenced(epoch: int | None) -> Iterator[None]:
    """Every write :class:`UnitOfWork` opened inside commits only while the store's fencing epoch is ``epoch``
    (PostgreSQL; None: no check, e.g. SQLite's sole process)."""
    token = _FENCE.set(epoch)
    try:
        yield
    finally:
        _FENCE.reset(token)


def _lock_key(name: str) -> int:
    """A signed 64-bit advisory lock key for ``name`` (PostgreSQL's bigint)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


class UnitOfWork:
    def __init__(self, engine: Engine, *, write: bool) -> None:
        self._write = write
        self._postgres = engine.dialect.name == "postgresql"
        self._fence = _FENCE.get() if write and self._postgres else None
        self._idle_ms = 0 if self._fence is None else int(timeouts_of(engine)[1] * 1000)  # only a fenced write's
        if write:
            self._engine = writer(engine)
        elif self._postgres:
            # at READ COMMITTED a read transaction adds no consistency, only BEGIN/ROLLBACK round trips
            self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            self._engine = engine
        self.session: Session

    def __enter__(self) -> UnitOfWork:
        self.session = Session(self._engine, expire_on_commit=False, autoflush=True)
        self.session.begin()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.session.in_transaction():
                if not self._write and exc_type is None:
                    # ending a read by commit keeps loaded rows usable after the block (rollback expires them)
                    self.session.commit()
                else:
                    self.session.rollback()
        finally:
            self.session.close()

    def commit(self) -> None:
        if self._fence is not None:
            self._check_fence(self._fence)
        self.session.commit()

    def _check_fence(self, epoch: int) -> None:
        """Roll back and raise :class:`FencedOut` unless the store's fencing epoch is still ``epoch`` (read FOR
        SHARE: held to the commit that follows, so a new leader's bump waits for it). The same statement bounds how
        long the transaction may then sit idle (``idle_in_transaction_session_timeout``, the statement timeout): a
        process cut off between the check and its commit cannot hold every new leader's bump for the server's TCP
        keepalive (hours); PostgreSQL ends its session and the share lock with it."""
        now = self.session.execute(
            select(
                LeaderFenceRow.epoch, func.set_config("idle_in_transaction_session_timeout", str(self._idle_ms), True)
            )
            .where(LeaderFenceRow.id == 1)
            .with_for_update(read=True)
        ).first()
        if now is None or now[0] != epoch:
            self.session.rollback()
            got = None if now is None else now[0]
            raise FencedOut(f"this process led at fencing epoch {epoch}, the store is at {got}: another process leads")

    def lock(self, stmt: SelectT, *, key_share: bool = False) -> SelectT:
        """``FOR UPDATE`` (``key_share``: ``FOR KEY SHARE``, which only keeps the rows from being deleted or their
        key changed) on PostgreSQL; the statement unchanged on SQLite."""
        return stmt.with_for_update(key_share=key_share) if self._postgres else stmt

    def insert(self, model: Any) -> Any:
        """``INSERT INTO model`` of the dialect in use (both offer ``on_conflict_do_update``)."""
        return (pg_insert if self._postgres else sqlite_insert)(model)

    def serialize(self, kind: str, names: Iterable[str]) -> None:
        """Hold a transaction-scoped advisory lock on each ``kind:name`` until commit or rollback, so writers of
        the same names run one after the other. PostgreSQL only: SQLite's BEGIN IMMEDIATE serializes every writer.
        The locks are taken in key order, so two transactions never wait on each other."""
        if not self._postgres:
            return
        keys = sorted({_lock_key(f"{kind}:{name}") for name in names})
        if keys:
            self.session.execute(text("SELECT pg_advisory_xact_lock(:k)"), [{"k": k} for k in keys])

    def update_versioned(self, model: Any, row: Any, values: dict[str, object], what: str) -> None:
        """``UPDATE model SET values, version = version + 1 WHERE id = row.id AND version = row.version``: the
        one write of a status change, so of two transactions that read the same version exactly one writes
        (ConflictError naming ``what`` for the other). ``values`` gains the new version."""
        values["version"] = row.version + 1
        result = self.session.execute(
            update(model)
            .where(model.id == row.id, model.version == row.version)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise ConflictError(f"{what} changed concurrently; retry")

    def audit(
        self, *, at_s: int, actor: str, action: str, entity: str, entity_id: str, detail: dict[str, Any] | None = None
    ) -> None:
        """Append one event to the audit log, in the same transaction as the change it records."""
        self.session.add(
            AuditEventRow(
                at_s=at_s,
                actor=actor,
                action=action,
                entity=entity,
                entity_id=entity_id,
                detail_json=json.dumps(detail or {}, sort_keys=True, default=str),
            )
        )
