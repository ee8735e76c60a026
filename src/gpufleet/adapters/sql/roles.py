"""PostgreSQL roles that make the audit log append-only against the service itself.

Migration 0009 creates two NOLOGIN roles per (database, schema), so parallel stores in one cluster (each test
schema, each deployment) never share or collide on a role (roles are cluster-wide):

* ``gf_<db>_<schema>_audit`` owns ``audit_events`` and its trigger function. Only the owner may ``DROP TRIGGER``,
  ``ALTER`` or ``DROP`` the table; nobody logs in as it.
* ``gf_<db>_<schema>_service`` is the group the serving login joins: SELECT/INSERT/UPDATE/DELETE on every table
  (and future ones), but on ``audit_events`` only SELECT and INSERT (no UPDATE, DELETE or TRUNCATE privilege).

Deployment: migrate as the owner role (it owns the schema and needs CREATEROLE), serve as a login that is a member
of the service group only: ``GRANT "gf_..._service" TO gpufleet_app``. ``gpufleet db upgrade`` prints both names.
"""

from __future__ import annotations

import hashlib
import re

from sqlalchemy import Connection, text

MAX_BASE = 40  # role names are at most 63 bytes: "gf_" + base + "_service"


def role_names(database: str, schema: str) -> tuple[str, str]:
    """(audit owner role, service group role) of a store in ``database``.``schema``."""
    base = re.sub(r"[^a-z0-9_]", "_", f"{database}_{schema}".lower())
    if len(base) > MAX_BASE:
        digest = hashlib.sha256(f"{database}\0{schema}".encode()).hexdigest()[:10]
        base = f"{base[: MAX_BASE - 11]}_{digest}"
    return f"gf_{base}_audit", f"gf_{base}_service"


def store_role_names(conn: Connection) -> tuple[str, str]:
    """The role names of the store this connection's ``search_path`` points at."""
    database, schema = conn.execute(text("SELECT current_database(), current_schema()")).one()
    return role_names(str(database), str(schema))


def drop_store_roles(conn: Connection, schema: str, extra: tuple[str, ...] = ()) -> None:
    """Drop the roles migration 0009 made for ``schema`` in the connection's database (after the schema is gone;
    roles are cluster-wide and would otherwise outlive a throwaway store), and any ``extra`` roles first."""
    database = str(conn.execute(text("SELECT current_database()")).scalar_one())
    for role in (*extra, *reversed(role_names(database, schema))):
        if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first():
            conn.execute(text(f'DROP OWNED BY "{role}" CASCADE'))
            conn.execute(text(f'DROP ROLE "{role}"'))
