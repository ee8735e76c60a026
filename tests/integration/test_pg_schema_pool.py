"""The recycled PostgreSQL schemas of the ``database`` fixtures (tests/integration/pg_pool.py): a schema handed out
again is as fresh as a newly migrated one (no rows a test wrote, sequences where the migration left them, the
seeded catalog intact), and a schema a test changed in any other way is dropped, never handed out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, create_engine, text

from gpufleet.service.leader import LOCK_NAME
from tests.integration.conftest import PG_ADMIN_URL, drop_store_roles
from tests.integration.pg_pool import SchemaPool

pytestmark = pytest.mark.postgres


@pytest.fixture
def pool(pg_reason: str | None) -> Iterator[SchemaPool]:
    if pg_reason:
        pytest.skip(pg_reason)
    p = SchemaPool(PG_ADMIN_URL, drop_roles=drop_store_roles)
    yield p
    p.close()


def _exists(conn: Connection, schema: str) -> bool:
    return conn.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": schema}).first() is not None


def _audit(conn: Connection, schema: str) -> None:
    conn.execute(
        text(
            f"INSERT INTO {schema}.audit_events (at_s, actor, action, entity, entity_id, detail_json)"
            " VALUES (1, 'a', 'b', 'c', 'd', '{}')"
        )
    )


def test_a_schema_comes_back_empty_with_its_sequences_and_seeded_rows_as_migrated(pool: SchemaPool) -> None:
    schema = pool.take()
    with pool._engine().connect() as conn:
        fresh_pools = conn.execute(text(f"SELECT count(*) FROM {schema}.pools")).scalar_one()
        conn.execute(text(f"INSERT INTO {schema}.teams (id, name) VALUES ('t1', 'one')"))
        _audit(conn, schema)
        _audit(conn, schema)
    pool.give_back(schema)
    assert pool.take() == schema and (pool.created, pool.reused) == (1, 1)
    with pool._engine().connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {schema}.teams")).scalar_one() == 0
        assert conn.execute(text(f"SELECT count(*) FROM {schema}.audit_events")).scalar_one() == 0
        assert conn.execute(text(f"SELECT count(*) FROM {schema}.pools")).scalar_one() == fresh_pools > 0
        assert conn.execute(text(f"SELECT epoch, holder FROM {schema}.leader_fence")).one() == (0, "")
        _audit(conn, schema)  # the id sequence starts over, as in a new schema
        assert conn.execute(text(f"SELECT id FROM {schema}.audit_events")).scalar_one() == 1
        # the audit log is still append-only for everyone else: the triggers were only off while it was emptied
        with pytest.raises(Exception, match="append-only"):
            conn.execute(text(f"DELETE FROM {schema}.audit_events"))


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE {s}.teams ADD COLUMN x int",  # the structure
        "ALTER TABLE {s}.audit_events DISABLE TRIGGER USER",
        "CREATE INDEX ix_test ON {s}.teams (name)",
        "CREATE TABLE {s}.extra (id int)",
        'REVOKE INSERT ON {s}.teams FROM PUBLIC, "{service}"',  # a grant
        'ALTER ROLE "{service}" SET statement_timeout = 1',  # the store's roles
        "DROP TABLE {s}.placement_admissions",  # a downgrade's kind of change
    ],
)
def test_a_schema_changed_otherwise_is_dropped_not_handed_out(pool: SchemaPool, change: str) -> None:
    schema = pool.take()
    service = pool._names(schema)["service"]
    with pool._engine().connect() as conn:
        conn.execute(text("SET session_replication_role = replica"))  # so the seeded catalog can be changed
        conn.execute(text(change.format(s=schema, service=service)))
        conn.execute(text("RESET session_replication_role"))
    pool.give_back(schema)
    with pool._engine().connect() as conn:
        assert not _exists(conn, schema)
        assert not conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": service}).first()
    assert pool.take() != schema and (pool.created, pool.reused) == (2, 0)


def test_seeded_rows_a_test_changed_are_put_back(pool: SchemaPool) -> None:
    """The leader fence (every server start bumps it), the catalog's prices, alembic's revision row."""
    schema = pool.take()
    with pool._engine().connect() as conn:
        before = {t: conn.execute(text(f"SELECT * FROM {schema}.{t} ORDER BY 1")).all() for t in SEEDED}
        conn.execute(text("SET session_replication_role = replica"))
        conn.execute(text(f"UPDATE {schema}.leader_fence SET epoch = 7, holder = 'me'"))
        conn.execute(text(f"UPDATE {schema}.pools SET price_uusd_per_gpu_h = price_uusd_per_gpu_h + 1"))
        conn.execute(text(f"DELETE FROM {schema}.skus"))
        conn.execute(text(f"UPDATE {schema}.alembic_version SET version_num = 'x'"))
        conn.execute(text("RESET session_replication_role"))
    pool.give_back(schema)
    assert pool.take() == schema
    with pool._engine().connect() as conn:
        assert {t: conn.execute(text(f"SELECT * FROM {schema}.{t} ORDER BY 1")).all() for t in SEEDED} == before


SEEDED = ("leader_fence", "pools", "skus", "providers", "regions", "alembic_version")


def test_the_login_role_a_test_made_is_dropped_and_the_schema_kept(pool: SchemaPool) -> None:
    schema = pool.take()
    login = pool._names(schema)["login"]
    with pool._engine().connect() as conn:
        conn.execute(text(f'CREATE ROLE "{login}" LOGIN IN ROLE "{pool._names(schema)["service"]}"'))
    pool.give_back(schema)
    with pool._engine().connect() as conn:
        assert not conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": login}).first()
    assert pool.take() == schema


@pytest.mark.parametrize(
    "late", ["INSERT INTO {s}.teams (id, name) VALUES ('late', 'late')", "UPDATE {s}.leader_fence SET epoch = 1"]
)
def test_a_row_written_after_the_schema_was_given_back_makes_it_dropped(pool: SchemaPool, late: str) -> None:
    """A straggler of the previous test (a thread or process still writing) is caught when the schema is taken."""
    schema = pool.take()
    pool.give_back(schema)
    with pool._engine().connect() as conn:
        conn.execute(text(late.format(s=schema)))
    assert pool.take() != schema
    with pool._engine().connect() as conn:
        assert not _exists(conn, schema)


def test_a_schema_whose_leader_lock_a_session_still_holds_is_dropped_not_handed_out(pool: SchemaPool) -> None:
    """The leader lock is a session-level advisory lock keyed by the schema's name (service/leader.py), so it
    outlives the schema's rows: a test that left a leader's session open made the next test on the recycled schema
    lose the lead it expected (seen once: a reconcile pass 'lost the lead before planning' its first SKU). Such a
    schema is dropped; the next test gets a new name, hence a new key."""
    schema = pool.take()
    holder = create_engine(PG_ADMIN_URL)
    try:
        with holder.connect() as leader:
            key = "hashtextextended(CAST(:name AS text) || CAST(:schema AS text), 0)"
            args = {"name": LOCK_NAME, "schema": schema}
            assert leader.execute(text(f"SELECT pg_try_advisory_lock({key})"), args).scalar_one()
            pool.give_back(schema)
            with pool._engine().connect() as conn:
                assert not _exists(conn, schema)
    finally:
        holder.dispose()
    assert pool.take() != schema and (pool.created, pool.reused) == (2, 0)
