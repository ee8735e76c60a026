"""Reading the append-only audit log (writes happen in each use case's own transaction)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, select

from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.uow import UnitOfWork


class AuditService:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(
        self, actor: Actor, *, entity_id: str | None, action: str | None, after_id: int, limit: int
    ) -> list[dict[str, Any]]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        with UnitOfWork(self._engine, write=False) as uow:
            stmt = select(AuditEventRow).where(AuditEventRow.id > after_id).order_by(AuditEventRow.id).limit(limit)
            if entity_id is not None:
                stmt = stmt.where(AuditEventRow.entity_id == entity_id)
            if action is not None:
                stmt = stmt.where(AuditEventRow.action == action)
            return [
                {
                    "id": r.id,
                    "at_s": r.at_s,
                    "actor": r.actor,
                    "action": r.action,
                    "entity": r.entity,
                    "entity_id": r.entity_id,
                    "detail": json.loads(r.detail_json),
                }
                for r in uow.session.scalars(stmt).all()
            ]
