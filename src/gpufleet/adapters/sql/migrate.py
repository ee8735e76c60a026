"""Schema migrations shipped inside the package, and the startup check that refuses an unmigrated database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from gpufleet.adapters.sql.engine import UNBOUNDED_OPTION, safe_url, timeouts_of, writer
from gpufleet.domain.errors import GpufleetError, ValidationError

SCRIPT_LOCATION = "gpufleet.adapters.sql:migrations"


class DatabaseNotMigrated(GpufleetError):
    """The database schema is not at the revision this code needs."""


class DatabaseUnavailable(GpufleetError):
    """The database cannot be opened or reached: a folder that does not exist, a file that is not a database,
    a server that does not answer or refuses the login."""

    def __init__(self, engine: Engine, exc: DBAPIError) -> None:
        why = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        super().__init__(f"cannot open database {safe_url(engine)}: {why}")


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
    """The schema revision, or None for an empty database; :class:`DatabaseUnavailable` when it cannot be read."""
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except DBAPIError as exc:
        raise DatabaseUnavailable(engine, exc) from None


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Bring the schema to ``revision``; returns (revision before, revision after).

    One upgrade at a time per store: the migration's transaction first takes SQLite's write lock (``BEGIN
    IMMEDIATE``) or a PostgreSQL advisory lock keyed by the schema, and reads the revision under it, so a second
    ``db upgrade`` started meanwhile waits for the first and finds nothing left to do.

    No statement timeout: one step may copy or index a table of tens of millions of rows, longer than the service's
    bound on a statement, and a cancelled step would fail every re-run. Waiting for a lock stays bounded (SQLite's
    busy timeout; PostgreSQL's ``lock_timeout``, set to the engine's statement timeout) so that an upgrade stuck
    behind a long transaction fails instead of queueing every query of the service behind it."""
    before = current_revision(engine)
    cfg = alembic_config(engine)
    try:
        ScriptDirectory.from_config(cfg).get_revisions(revision)
    except CommandError as exc:  # an unknown or ambiguous revision: refused before anything is written
        raise ValidationError("revision", str(exc)) from None
    _known(engine, before)
    try:
        with writer(engine).execution_options(**{UNBOUNDED_OPTION: True}).connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:  # see _sqlite_foreign_keys; a pragma, so before the transaction begins
                _sqlite_foreign_keys(conn, on=False)
            try:
                with conn.begin():
                    if conn.dialect.name == "postgresql":
                        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
                        conn.execute(text(_PG_MIGRATION_LOCK))  # waits for another upgrade as long as it runs
                        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {int(timeouts_of(engine)[1] * 1000)}")
                    before = MigrationContext.configure(conn).get_current_revision()
                    _known(engine, before)
                    cfg.attributes["connection"] = conn
                    try:
                        command.upgrade(cfg, revision)
                    except CommandError as exc:  # a target only the store's revision rules out ("-1": no upgrade)
                        raise ValidationError("revision", f"{revision!r}: {exc}") from None
                    if sqlite:
                        _sqlite_check_foreign_keys(engine, conn)
            finally:
                if sqlite:
                    _sqlite_foreign_keys(conn, on=True)
    except DBAPIError as exc:  # the database refused the migration (no right to create tables, no such schema)
        why = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        raise DatabaseNotMigrated(f"database {safe_url(engine)} refused the migration: {why}") from None
    return before, current_revision(engine) or ""


# held until the migration's transaction ends; the leader's lock (service/leader.py) is keyed by another name
_PG_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('gpufleet.migrate:' || current_schema(), 0))"


def _sqlite_foreign_keys(conn: Connection, *, on: bool) -> None:
    """SQLite rebuilds a table to alter it (``batch_alter_table``: copy, drop the old table, rename the copy); with
    foreign keys enforced, dropping a table that other rows reference fails ("FOREIGN KEY constraint failed"), so a
    store holding, say, an approved reservation could not be upgraded. Enforcement is off while the migrations run
    and :func:`_sqlite_check_foreign_keys` checks every reference before they commit. The pragma is a no-op inside a
    transaction: it goes to the driver's connection directly (no SQLAlchemy autobegin)."""
    conn.connection.dbapi_connection.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")  # type: ignore[union-attr]


def _sqlite_check_foreign_keys(engine: Engine, conn: Connection) -> None:
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        first = broken[0]
        raise DatabaseNotMigrated(
            f"database {safe_url(engine)} refused the migration: {len(broken)} row(s) reference a missing row "
            f"(first: table {first[0]} rowid {first[1]} -> {first[2]}); nothing was changed"
        )


def _known(engine: Engine, revision: str | None) -> None:
    """Refuse a database at a revision this gpufleet does not ship (a newer release wrote it): nothing here can
    migrate it, and ``db upgrade`` would not help."""
    if revision is None:
        return
    try:
        ScriptDirectory.from_config(alembic_config(engine)).get_revision(revision)
    except CommandError:
        raise DatabaseNotMigrated(
            f"database {safe_url(engine)} is at revision {revision}, which this gpufleet does not know (a newer "
            "release wrote it?): use a gpufleet that ships it"
        ) from None


def _missing_sqlite_file(engine: Engine) -> Path | None:
    """The file of a SQLite URL that does not exist yet (connecting would create it empty), else None."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if url.database.startswith("file:") or str(url.query.get("uri", "")).lower() in ("true", "1"):
        return None  # an SQLite URI names its own open mode
    path = Path(url.database)
    return None if path.exists() else path


def ensure_migrated(engine: Engine, *, safe_url: str) -> None:
    """Raise :class:`DatabaseNotMigrated` with the command that fixes it unless the schema is at head.
    A SQLite file that does not exist is refused before connecting, so a mistyped path leaves no empty file;
    only ``gpufleet db upgrade`` creates a database."""
    missing = _missing_sqlite_file(engine)
    if missing is not None:
        raise DatabaseNotMigrated(
            f"database {safe_url} does not exist (no file {missing}); to create it, "
            f"run: gpufleet db upgrade --db '{safe_url}'"
        )
    have = current_revision(engine)
    need = head_revision(engine)
    _known(engine, have)
    if have != need:
        state = "has no gpufleet schema" if have is None else f"is at revision {have}"
        raise DatabaseNotMigrated(
            f"database {safe_url} {state} but this gpufleet needs revision {need}; "
            f"run: gpufleet db upgrade --db '{safe_url}'"
        )


class RevisionGate:
    """For a process that writes into a store it could not check at start (``gpufleet controller``, started while
    the store was down): :meth:`check` runs :func:`ensure_migrated` the first time and again after each
    :meth:`reset` (call it when a use of the store failed: it may come back restored from an older backup, or
    upgraded by a newer release), and raises :class:`DatabaseNotMigrated` (or :class:`DatabaseUnavailable`) instead
    of letting the caller write into a schema it was not written for. Thread-safe enough: a race re-checks."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._checked = False

    def check(self) -> None:
        if not self._checked:
            ensure_migrated(self._engine, safe_url=safe_url(self._engine))
            self._checked = True

    def reset(self) -> None:
        self._checked = False


class RevisionWatch:
    """For a long-running process that acts on the store (``gpufleet serve``'s leader loop and its API writes,
    ``gpufleet reconcile``): the store may be moved to another schema revision under the running process (restored
    from an older backup, upgraded by a newer release's ``gpufleet db upgrade``). :meth:`check` reads the store's
    revision again (one ``SELECT`` on ``alembic_version``; the revision this code needs is read from the migration
    scripts once); :meth:`recent` answers from the last read while it is younger than ``max_age_s`` (an API write
    asks it: one ``SELECT`` per interval, not one per request). :attr:`off` keeps the last answer for cheap callers
    (a request asking whether it may submit to the provider); :attr:`moved` the store's revision when the last read
    found another one than this code's (None: at it, or not read: an unreachable store keeps the last answer)."""

    def __init__(self, engine: Engine, *, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self.need = head_revision(engine)
        self._clock_s = clock_s
        self._read_at_s: float | None = None
        self._reading = threading.Lock()
        self.off: str | None = None  # why the store was not usable at the last check; None: at this code's revision
        self.moved: str | None = None

    def check(self) -> str | None:
        """None when the store is at the revision this code needs, else why not (another revision, or unreachable)."""
        try:
            have = current_revision(self._engine)
        except DatabaseUnavailable as exc:
            why: str | None = str(exc)
        else:
            self.moved = None if have == self.need else str(have)
            why = (
                None
                if have == self.need
                else f"the store is at schema revision {have}, this gpufleet needs {self.need}"
            )
        self.off = why
        self._read_at_s = self._clock_s()
        return why

    def fresh(self, max_age_s: float) -> bool:
        """Whether the last read (of any caller) is younger than ``max_age_s``: :meth:`recent` would not read."""
        at = self._read_at_s
        return at is not None and self._clock_s() - at < max_age_s

    def recent(self, max_age_s: float) -> str | None:
        """:attr:`moved` as of a read at most ``max_age_s`` old: reads again when the last one is older, one caller
        at a time (the others meanwhile take the last answer instead of reading too)."""
        if not self.fresh(max_age_s) and self._reading.acquire(blocking=False):
            try:
                if not self.fresh(max_age_s):  # another caller may have read between the two looks
                    self.check()
            finally:
                self._reading.release()
        return self.moved
