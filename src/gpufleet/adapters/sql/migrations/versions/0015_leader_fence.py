"""The leader's fencing epoch: ``leader_fence`` holds one row (``id`` 1), the epoch of the lead now held. A process
that takes the leader lock (service/leader.py) bumps it and keeps its own value; every write transaction of its
reconciler pass re-reads it under a share lock just before it commits and rolls back when it moved on (another
process took the lead meanwhile). Nothing to migrate: the row starts at epoch 0.

Revision ID: 0015_leader_fence
Revises: 0014_bigint_ids
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_leader_fence"
down_revision = "0014_bigint_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    fence = op.create_table(
        "leader_fence",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
    )
    op.bulk_insert(fence, [{"id": 1, "epoch": 0, "holder": ""}])


def downgrade() -> None:
    op.drop_table("leader_fence")
