"""64-bit ids for the tables that grow without bound: ``audit_events`` (a row per write of every use case, metered
hour, inventory sync and reconciler pass), ``forecast_issues`` (every served forecast) and ``budget_commitments``
(every admission against a budget). On PostgreSQL their ``id`` was an INTEGER serial (column and sequence capped at
2^31 - 1: past it every insert fails, and with ``audit_events`` every write of the service); now BIGINT, the column
and its sequence. SQLite's ``INTEGER PRIMARY KEY`` is its rowid, 64-bit already: nothing changes there.

The column's type change rewrites the table (PostgreSQL): on a large audit log it takes a while, under an exclusive
lock (``gpufleet db upgrade`` runs without the statement timeout; plan the upgrade's window for it).

Downgrading narrows them back to INTEGER, refused (by PostgreSQL, nothing changed) when an id is past 2^31 - 1.

Revision ID: 0014_bigint_ids
Revises: 0013_pool_price_history
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_bigint_ids"
down_revision = "0013_pool_price_history"
branch_labels = None
depends_on = None

TABLES = ("audit_events", "forecast_issues", "budget_commitments")


def _retype(kind: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table in TABLES:
        seq = bind.execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table}).scalar_one()
        op.execute(f"ALTER TABLE {table} ALTER COLUMN id TYPE {kind}")
        if seq is not None:  # the serial's sequence has a type (and a maximum) of its own
            op.execute(f"ALTER SEQUENCE {seq} AS {kind}")


def upgrade() -> None:
    _retype("BIGINT")


def downgrade() -> None:
    _retype("INTEGER")
