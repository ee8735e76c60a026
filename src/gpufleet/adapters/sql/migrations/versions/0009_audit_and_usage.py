"""Audit log append-only for real, and utilization records that name their pool.

* SQLite: a BEFORE INSERT trigger refuses an insert that would replace an existing audit row (``INSERT OR
  REPLACE`` deletes the old row without firing DELETE triggers unless ``recursive_triggers`` is on; a BEFORE
  INSERT trigger fires first, whatever the pragma).
* PostgreSQL: a BEFORE TRUNCATE trigger; ``audit_events`` and its trigger function handed to a NOLOGIN audit
  owner role, and a service group role with SELECT/INSERT only on it (see ``adapters/sql/roles.py``).
* ``utilization.pool_id`` (nullable: records from before name no pool) and an index for per-pool windows.

Revision ID: 0009_audit_and_usage
Revises: 0008_approval_hardening
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.adapters.sql.roles import store_role_names

revision = "0009_audit_and_usage"
down_revision = "0008_approval_hardening"
branch_labels = None
depends_on = None


def _create_role(name: str) -> None:
    op.execute(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN "
        f'CREATE ROLE "{name}" NOLOGIN; END IF; END $$'
    )


def _upgrade_postgres() -> None:
    bind = op.get_bind()
    audit, service = store_role_names(bind)
    schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
    op.execute(
        "CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit_events "
        "FOR EACH STATEMENT EXECUTE FUNCTION gpufleet_audit_append_only()"
    )
    _create_role(audit)
    _create_role(service)
    op.execute(f'GRANT "{audit}" TO CURRENT_USER')  # the migrating owner hands the table over (and back)
    op.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{service}"')
    op.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{service}"')
    op.execute(f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{service}"')
    op.execute(
        f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "{service}"'
    )
    op.execute(f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO "{service}"')
    op.execute("REVOKE ALL ON audit_events FROM PUBLIC")
    op.execute(f'REVOKE ALL ON audit_events FROM "{service}"')
    op.execute(f'GRANT SELECT, INSERT ON audit_events TO "{service}"')
    op.execute(f'ALTER TABLE audit_events OWNER TO "{audit}"')  # its id sequence follows the table
    op.execute(f'ALTER FUNCTION gpufleet_audit_append_only() OWNER TO "{audit}"')


def _downgrade_postgres() -> None:
    bind = op.get_bind()
    audit, service = store_role_names(bind)
    schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
    op.execute("ALTER TABLE audit_events OWNER TO CURRENT_USER")
    op.execute("ALTER FUNCTION gpufleet_audit_append_only() OWNER TO CURRENT_USER")
    op.execute("DROP TRIGGER audit_no_truncate ON audit_events")
    op.execute(
        f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" REVOKE ALL ON TABLES FROM "{service}"; '
        f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" REVOKE ALL ON SEQUENCES FROM "{service}"; '
        f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM "{service}"; '
        f'REVOKE ALL ON ALL SEQUENCES IN SCHEMA "{schema}" FROM "{service}"; '
        f'REVOKE USAGE ON SCHEMA "{schema}" FROM "{service}"'
    )
    _ = audit  # the roles stay (logins may still be members); drop them with DROP ROLE when retiring the store


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgres()
    else:
        op.execute(
            "CREATE TRIGGER audit_no_replace BEFORE INSERT ON audit_events "
            "WHEN EXISTS (SELECT 1 FROM audit_events WHERE id = NEW.id) "
            "BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END"
        )
    op.add_column("utilization", sa.Column("pool_id", sa.String(length=200), nullable=True))
    op.create_index("ix_util_pool_time", "utilization", ["pool_id", "bucket_start_s"])


def downgrade() -> None:
    op.drop_index("ix_util_pool_time", table_name="utilization")
    with op.batch_alter_table("utilization") as batch:
        batch.drop_column("pool_id")
    if op.get_bind().dialect.name == "postgresql":
        _downgrade_postgres()
    else:
        op.execute("DROP TRIGGER audit_no_replace")
