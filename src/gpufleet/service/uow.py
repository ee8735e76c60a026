"""Unit of work: one database transaction around one use case.

``UnitOfWork(engine, write=True)`` begins a write transaction (on SQLite ``BEGIN IMMEDIATE``: writers are
serialized); ``write=False`` a read. Leaving a write block without :meth:`commit` rolls back. ``lock(stmt)`` adds
``FOR UPDATE`` on PostgreSQL (row lock held to commit); on SQLite the immediate transaction already excludes
other writers, so it is a no-op there.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import Engine, Select, update
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.engine import writer
from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.domain.errors import ConflictError

SelectT = TypeVar("SelectT", bound=Select[Any])


class UnitOfWork:
    def __init__(self, engine: Engine, *, write: bool) -> None:
        self._write = write
        self._postgres = engine.dialect.name == "postgresql"
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
        self.session.commit()

    def lock(self, stmt: SelectT) -> SelectT:
        return stmt.with_for_update() if self._postgres else stmt

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
