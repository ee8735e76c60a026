"""Client idempotency keys on reservation proposals: a retried POST /v1/reservations returns the first
proposal instead of creating a second one (unique per creator).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("client_key", sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint("uq_reservations_creator_client_key", ["created_by", "client_key"])


def downgrade() -> None:
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_constraint("uq_reservations_creator_client_key", type_="unique")
        batch_op.drop_column("client_key")
