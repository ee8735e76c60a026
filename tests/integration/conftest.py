"""Fixtures for the service's integration tests: a migrated database per backend (SQLite file, or a fresh
PostgreSQL schema on 127.0.0.1:5432/test, dropped afterwards) and a live uvicorn server on loopback.

PostgreSQL tests carry the ``postgres`` mark and skip with the reason when the server is unreachable.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, create_engine, text

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql import migrate, roles
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.roles import role_names
from gpufleet.api.app import create_app
from gpufleet.service.auth import issue_token
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.reservations import CrashHook
from gpufleet.service.settings import Settings
from tests.integration.pg_pool import SchemaPool

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
NOW_S = 1_767_225_600  # 2026-01-01T00:00:00Z: the fake "now" of every test server


def _pg_unreachable_reason() -> str | None:
    try:
        eng = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 2})
        with eng.connect() as conn:
            conn.execute(text("select 1"))
        eng.dispose()
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432/test unreachable: {type(exc).__name__}: {str(exc)[:120]}"
    return None


@dataclass
class Database:
    url: str
    backend: str
    engine: Engine


@pytest.fixture(scope="session")
def pg_reason() -> str | None:
    return _pg_unreachable_reason()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (copying is ~100x faster than migrating)."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    return path


def _make_database(
    backend: str,
    tmp: Path,
    pg_reason: str | None,
    template: Path | None = None,
    revision: str = "head",
    schemas: SchemaPool | None = None,
) -> Iterator[Database]:
    """A fresh database at ``revision`` (SQLite file or a PostgreSQL schema of its own); ``template``: a migrated
    SQLite file to copy instead of migrating; ``schemas``: the PostgreSQL schemas at head to take one from (an
    earlier test's, emptied and checked as fresh: tests/integration/pg_pool.py) instead of migrating."""
    if backend == "sqlite":
        target = tmp / "gpufleet.db"
        if template is not None:
            shutil.copyfile(template, target)
        url = f"sqlite:///{target}"
        engine = make_engine(url)
        if template is None:
            migrate.upgrade(engine, revision)
        yield Database(url, backend, engine)
        engine.dispose()
        return
    if pg_reason:
        pytest.skip(pg_reason)
    if schemas is not None and revision == "head":
        schema = schemas.take()
        url = schemas.url(schema)
        engine = make_engine(url, pool_size=8)
        try:
            yield Database(url, backend, engine)
        finally:
            engine.dispose()
            schemas.give_back(schema)
        return
    schema = f"gft_{secrets.token_hex(6)}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{PG_ADMIN_URL}?options=-csearch_path%3D{schema}"
    engine = make_engine(url, pool_size=8)
    try:
        migrate.upgrade(engine, revision)
        yield Database(url, backend, engine)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            drop_store_roles(conn, schema)
        admin.dispose()


def drop_store_roles(conn: Any, schema: str) -> None:
    """Drop the audit and service roles migration 0009 made for ``schema`` (roles are cluster-wide: left behind,
    they would pile up across test runs), and the test login role ``<service>_login``."""
    _audit, service = role_names("test", schema)
    roles.drop_store_roles(conn, schema, extra=(f"{service}_login",))


BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def pg_schemas() -> Iterator[SchemaPool]:
    """This process's PostgreSQL schemas at head, recycled between the tests of ``database`` and
    ``shared_database`` (tests/integration/pg_pool.py); every one is dropped at the end."""
    schemas = SchemaPool(PG_ADMIN_URL, drop_roles=drop_store_roles)
    yield schemas
    schemas.close()


@pytest.fixture(params=BACKENDS)
def database(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    pg_reason: str | None,
    sqlite_template: Path,
    pg_schemas: SchemaPool,
) -> Iterator[Database]:
    """A fresh migrated database for one test."""
    yield from _make_database(request.param, tmp_path, pg_reason, sqlite_template, schemas=pg_schemas)


@pytest.fixture(scope="module", params=BACKENDS)
def shared_database(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    pg_reason: str | None,
    sqlite_template: Path,
    pg_schemas: SchemaPool,
) -> Iterator[Database]:
    """One migrated database shared by a module's tests (they use distinct ids)."""
    yield from _make_database(
        request.param, tmp_path_factory.mktemp("db"), pg_reason, sqlite_template, schemas=pg_schemas
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LiveServer:
    """A uvicorn server on loopback in a background thread, serving ``create_app`` over real HTTP."""

    services: Services
    base_url: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    def start(self) -> LiveServer:
        port = _free_port()
        app = create_app(services=self.services)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def token(self, role: str, user: str, team: str | None = None) -> str:
        key = f"{role}:{user}:{team}"
        if key not in self.tokens:
            self.tokens[key] = issue_token(
                self.services.engine, self.services.clock, _TokenIds(), role=role, user_id=user, team_id=team
            ).token
        return self.tokens[key]

    def client(self, role: str | None = None, user: str = "someone", team: str | None = None) -> httpx.Client:
        headers = {} if role is None else {"Authorization": f"Bearer {self.token(role, user, team)}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)


class _TokenIds:
    def new(self, prefix: str) -> str:
        return f"{prefix}_{secrets.token_hex(8)}"


ServerFactory = Callable[..., LiveServer]


def _start(
    db: Database,
    *,
    provider: SimulatedProvider | None = None,
    crash_hook: CrashHook | None = None,
    clock: FixedClock | None = None,
    **settings: Any,
) -> LiveServer:
    settings.setdefault("token_cache_s", 0)
    s = Settings(db_url=db.url, reconcile_interval_s=0, **settings)
    services = build_services(
        s,
        engine=db.engine,
        clock=clock or FixedClock(NOW_S),
        provider=provider or SimulatedProvider(db.engine),
        crash_hook=crash_hook,
    )
    return LiveServer(services).start()


@pytest.fixture(scope="module")
def shared_server(shared_database: Database) -> Iterator[LiveServer]:
    """One live server per module and backend."""
    server = _start(shared_database)
    yield server
    server.stop()


@pytest.fixture
def make_server() -> Iterator[ServerFactory]:
    """Start servers over a database; each gets its own services (a restart = a new server, same database)."""
    started: list[LiveServer] = []

    def factory(
        db: Database,
        *,
        provider: SimulatedProvider | None = None,
        crash_hook: CrashHook | None = None,
        clock: FixedClock | None = None,
        **settings: Any,
    ) -> LiveServer:
        server = _start(db, provider=provider, crash_hook=crash_hook, clock=clock, **settings)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
