"""Fixtures of the deployment tests (image, manifests on a real API server, several processes): a fresh
PostgreSQL schema (empty or migrated), dropped afterwards. Skips with the reason when PostgreSQL is unreachable."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, text

from gpufleet.adapters.sql.roles import drop_store_roles

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class PgSchema:
    name: str
    url: str


@pytest.fixture
def pg_schema() -> Iterator[PgSchema]:
    """An empty schema of its own; ``url`` points the search_path at it."""
    try:
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 2})
        with admin.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432/test unreachable: {type(exc).__name__}")
    name = f"gfd_{secrets.token_hex(6)}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    try:
        yield PgSchema(name, f"{PG_ADMIN_URL}?options=-csearch_path%3D{name}")
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
            drop_store_roles(conn, name)  # migration 0009's per-schema roles are cluster-wide
        admin.dispose()
