"""PostgreSQL schemas migrated to head, recycled between tests in one pytest process.

Migrating a fresh schema costs ~1-2 s here (about 120 DDL statements, most of it PostgreSQL's catalog work), and
some 300 tests each took one. A schema a test is done with is emptied instead and handed to a later test, but only
when it is provably as fresh as a new one:

* its structure, privileges and roles are what they were right after its migration: a digest of the catalog
  (tables and columns with their types and defaults, constraints, indexes, triggers and whether they are enabled,
  functions, owners, grants, default privileges, sequences' definitions, the store's two roles with their
  attributes and memberships) equals the one taken then;
* the rows the migrations seed (the built-in catalog, the leader fence, alembic's revision) are put back as they
  were if a test changed them (kept as JSON, checked against a digest of the table taken then), every other table
  is emptied (``DELETE`` as the superuser with triggers off: ``session_replication_role = replica``, so the audit
  log's append-only triggers and the foreign keys stand aside) and every sequence is set back to where the
  migration left it;
* the login role a test may have made for the store (``<service>_login``) is dropped, as before.

Anything else, or any error while emptying (a lock held past ``lock_timeout`` by a connection the test left
open), and the schema is dropped as before and the next test gets a freshly migrated one. When a schema is handed
out again its tables are checked to be still as left (a straggling writer of the previous test).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, create_engine, text

from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.roles import role_names
from gpufleet.service.leader import LOCK_NAME

_CATALOG = """
WITH s AS (SELECT oid, nspowner, nspacl FROM pg_namespace WHERE nspname = :schema),
r AS (SELECT * FROM pg_roles WHERE rolname IN (:audit, :service, :login))
SELECT md5(coalesce(string_agg(x, E'\\n' ORDER BY x), '')) FROM (
  SELECT concat_ws(' ', 'nsp', pg_get_userbyid(s.nspowner), s.nspacl::text) FROM s
  UNION ALL
  SELECT concat_ws(' ', 'rel', c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relacl::text,
                   c.reloptions::text, c.relrowsecurity, c.relforcerowsecurity, c.relreplident)
  FROM pg_class c JOIN s ON c.relnamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'col', c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                   a.attidentity, a.attgenerated, a.attisdropped, a.attacl::text, pg_get_expr(d.adbin, d.adrelid))
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN s ON c.relnamespace = s.oid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attnum > 0
  UNION ALL
  SELECT concat_ws(' ', 'con', t.conrelid::regclass::text, t.conname, pg_get_constraintdef(t.oid))
  FROM pg_constraint t JOIN s ON t.connamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'idx', pg_get_indexdef(i.indexrelid))
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN s ON c.relnamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'trg', pg_get_triggerdef(t.oid), t.tgenabled)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN s ON c.relnamespace = s.oid WHERE NOT t.tgisinternal
  UNION ALL
  SELECT concat_ws(' ', 'fn', p.proname, pg_get_userbyid(p.proowner), p.proacl::text, md5(p.prosrc))
  FROM pg_proc p JOIN s ON p.pronamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'view', c.relname, pg_get_viewdef(c.oid))
  FROM pg_class c JOIN s ON c.relnamespace = s.oid WHERE c.relkind IN ('v', 'm')
  UNION ALL
  SELECT concat_ws(' ', 'pol', p.polname, p.polrelid::regclass::text, p.polcmd, pg_get_expr(p.polqual, p.polrelid))
  FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN s ON c.relnamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'dacl', d.defaclobjtype, pg_get_userbyid(d.defaclrole), d.defaclacl::text)
  FROM pg_default_acl d JOIN s ON d.defaclnamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'seq', c.relname, q.seqtypid::regtype::text, q.seqstart, q.seqincrement, q.seqmax, q.seqmin,
                   q.seqcache, q.seqcycle)
  FROM pg_sequence q JOIN pg_class c ON c.oid = q.seqrelid JOIN s ON c.relnamespace = s.oid
  UNION ALL
  SELECT concat_ws(' ', 'role', r.rolname, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin,
                   r.rolreplication, r.rolbypassrls, r.rolconnlimit, r.rolvaliduntil::text, r.rolconfig::text)
  FROM r
  UNION ALL
  SELECT concat_ws(' ', 'member', pg_get_userbyid(m.roleid), pg_get_userbyid(m.member), m.admin_option)
  FROM pg_auth_members m WHERE m.roleid IN (SELECT oid FROM r) OR m.member IN (SELECT oid FROM r)
) AS parts(x)
"""

_TABLES = "SELECT relname FROM pg_class WHERE relnamespace = CAST(:schema AS regnamespace) AND relkind IN ('r', 'p')"
_SEQUENCES = "SELECT relname FROM pg_class WHERE relnamespace = CAST(:schema AS regnamespace) AND relkind = 'S'"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class _Fresh:
    """What a schema looked like right after its migration."""

    schema: str
    catalog: str
    seeded: dict[str, tuple[str, str]]  # table -> (digest of its rows, its rows as JSON)
    emptied: list[str]  # the tables the migration left empty
    sequences: dict[str, tuple[int, bool]]  # sequence -> (last_value, is_called)


@dataclass
class SchemaPool:
    """Schemas at head for one pytest process; ``take`` one, ``give_back`` it, ``close`` at the end."""

    admin_url: str
    database: str = "test"
    drop_roles: Callable[[Connection, str], None] | None = None
    created: int = 0
    reused: int = 0
    _free: list[_Fresh] = field(default_factory=list)
    _out: dict[str, _Fresh] = field(default_factory=dict)
    _admin: Engine | None = None

    def _engine(self) -> Engine:
        if self._admin is None:
            self._admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        return self._admin

    def url(self, schema: str) -> str:
        return f"{self.admin_url}?options=-csearch_path%3D{schema}"

    def take(self) -> str:
        while self._free:
            fresh = self._free.pop(0)
            with self._engine().connect() as conn:
                untouched = not any(_has_rows(conn, fresh.schema, t) for t in fresh.emptied) and all(
                    _digest(conn, fresh.schema, t) == digest for t, (digest, _) in fresh.seeded.items()
                )
            if untouched and self._leader_lock_free(fresh.schema):
                self._out[fresh.schema] = fresh
                self.reused += 1
                return fresh.schema
            self._drop(fresh.schema)
        schema = f"gft_{secrets.token_hex(6)}"
        with self._engine().connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            engine = make_engine(self.url(schema))
            try:
                migrate.upgrade(engine)
            finally:
                engine.dispose()
            with self._engine().connect() as conn:
                self._out[schema] = self._snapshot(conn, schema)
        except BaseException:
            self._drop(schema)
            raise
        self.created += 1
        return schema

    def give_back(self, schema: str) -> None:
        fresh = self._out.pop(schema)
        try:
            reusable = self._empty(fresh) and self._leader_lock_free(schema)
        except Exception:
            reusable = False
        if reusable:
            self._free.append(fresh)
        else:
            self._drop(schema)

    def close(self) -> None:
        for fresh in [*self._free, *self._out.values()]:
            self._drop(fresh.schema)
        self._free.clear()
        self._out.clear()
        if self._admin is not None:
            self._admin.dispose()

    def _names(self, schema: str) -> dict[str, str]:
        audit, service = role_names(self.database, schema)
        return {"schema": schema, "audit": audit, "service": service, "login": f"{service}_login"}

    def _snapshot(self, conn: Connection, schema: str) -> _Fresh:
        tables = [str(t) for t in conn.execute(text(_TABLES), {"schema": schema}).scalars()]
        seeded = {t: (_digest(conn, schema, t), _rows(conn, schema, t)) for t in tables if _has_rows(conn, schema, t)}
        sequences = {
            str(seq): _sequence(conn, schema, str(seq))
            for seq in conn.execute(text(_SEQUENCES), {"schema": schema}).scalars()
        }
        catalog = str(conn.execute(text(_CATALOG), self._names(schema)).scalar_one())
        return _Fresh(schema, catalog, seeded, [t for t in tables if t not in seeded], sequences)

    def _empty(self, fresh: _Fresh) -> bool:
        """Empty the tables the migration left empty and reset the sequences; True when the schema is then as
        fresh as a new one (else it is left for :meth:`_drop`)."""
        schema, names = fresh.schema, self._names(fresh.schema)
        with self._engine().connect() as conn:
            if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :login"), names).first():
                conn.execute(text(f"DROP OWNED BY {_q(names['login'])} CASCADE"))
                conn.execute(text(f"DROP ROLE {_q(names['login'])}"))
        with self._engine().connect() as conn:
            conn.execution_options(isolation_level="READ COMMITTED")  # one transaction (the engine autocommits)
            with conn.begin():
                conn.execute(text("SET LOCAL lock_timeout = '5s'"))
                conn.execute(text("SET LOCAL session_replication_role = replica"))
                if str(conn.execute(text(_CATALOG), names).scalar_one()) != fresh.catalog:
                    return False
                tables = {str(t) for t in conn.execute(text(_TABLES), {"schema": schema}).scalars()}
                if tables != {*fresh.emptied, *fresh.seeded}:
                    return False
                for table, (digest, rows) in fresh.seeded.items():  # the leader fence, a pool's price...
                    if _digest(conn, schema, table) != digest:
                        name = f"{_q(schema)}.{_q(table)}"
                        conn.execute(text(f"DELETE FROM {name}"))
                        restore = f"INSERT INTO {name} OVERRIDING SYSTEM VALUE SELECT * FROM "
                        restore += f"json_populate_recordset(CAST(NULL AS {name}), CAST(:rows AS json))"
                        conn.execute(text(restore), {"rows": rows})
                        if _digest(conn, schema, table) != digest:
                            return False
                for table in fresh.emptied:
                    conn.execute(text(f"DELETE FROM {_q(schema)}.{_q(table)}"))
                for seq, (last, called) in fresh.sequences.items():
                    conn.execute(
                        text("SELECT setval(CAST(:seq AS regclass), :last, :called)"),
                        {"seq": f"{_q(schema)}.{_q(seq)}", "last": last, "called": called},
                    )
        return True

    def _leader_lock_free(self, schema: str) -> bool:
        """Whether no session holds the schema's leader lock (``service/leader.py``: a session-level advisory lock
        keyed by the schema's name, so it outlives the schema's rows). A test that left a leader's session open (or
        one still closing) would make the next test on a recycled schema lose the lead it expects: such a schema is
        dropped instead (a new name, a new key)."""
        key = "hashtextextended(CAST(:name AS text) || CAST(:schema AS text), 0)"
        with self._engine().connect() as conn:
            if not conn.execute(
                text(f"SELECT pg_try_advisory_lock({key})"), {"name": LOCK_NAME, "schema": schema}
            ).scalar_one():
                return False
            conn.execute(text(f"SELECT pg_advisory_unlock({key})"), {"name": LOCK_NAME, "schema": schema})
        return True

    def _drop(self, schema: str) -> None:
        with self._engine().connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            if self.drop_roles is not None:
                self.drop_roles(conn, schema)


def _has_rows(conn: Connection, schema: str, table: str) -> bool:
    return conn.execute(text(f"SELECT 1 FROM {_q(schema)}.{_q(table)} LIMIT 1")).first() is not None


def _digest(conn: Connection, schema: str, table: str) -> str:
    sql = f"SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM {_q(schema)}.{_q(table)} t"
    return str(conn.execute(text(sql)).scalar_one())


def _rows(conn: Connection, schema: str, table: str) -> str:
    return str(
        conn.execute(text(f"SELECT coalesce(json_agg(t), '[]')::text FROM {_q(schema)}.{_q(table)} t")).scalar_one()
    )


def _sequence(conn: Connection, schema: str, seq: str) -> tuple[int, bool]:
    last, called = conn.execute(text(f"SELECT last_value, is_called FROM {_q(schema)}.{_q(seq)}")).one()
    return int(last), bool(called)
