"""Alembic environment: runs migrations on the connection the caller hands in (see ``adapters.sql.migrate``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from gpufleet.adapters.sql.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)  # type: ignore[arg-type]
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()
