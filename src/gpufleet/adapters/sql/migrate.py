"""Schema migrations shipped inside the package, and the startup check that refuses an unmigrated database."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from gpufleet.domain.errors import GpufleetError

SCRIPT_LOCATION = "gpufleet.adapters.sql:migrations"


class DatabaseNotMigrated(GpufleetError):
    """The database schema is not at the revision this code needs."""


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def head_revision(engine: Engine) -> str:
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Bring the schema to ``revision``; returns (revision before, revision after)."""
    before = current_revision(engine)
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return before, current_revision(engine) or ""


def ensure_migrated(engine: Engine, *, safe_url: str) -> None:
    """Raise :class:`DatabaseNotMigrated` with the command that fixes it unless the schema is at head."""
    have = current_revision(engine)
    need = head_revision(engine)
    if have != need:
        state = "has no gpufleet schema" if have is None else f"is at revision {have}"
        raise DatabaseNotMigrated(
            f"database {safe_url} {state} but this gpufleet needs revision {need}; "
            f"run: gpufleet db upgrade --db '{safe_url}'"
        )
