"""Victims promised to admissions: ``placement_victims`` holds one row per (pool, running workload) that an admitted
placement (``POST /v1/placement/recommendations`` with ``admit: true``) was told to preempt, with who admitted it
(``admitted_by``) and until when the promise holds (``expires_at_s``). While it holds, no other placement answer
counts that workload's GPUs as freed. Nothing to migrate: no promise was recorded before.

Revision ID: 0017_placement_victims
Revises: 0016_reservation_operations
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_placement_victims"
down_revision = "0016_reservation_operations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "placement_victims",
        sa.Column("pool_id", sa.String(length=200), sa.ForeignKey("pools.id"), primary_key=True),
        sa.Column("workload_id", sa.String(length=64), primary_key=True),
        sa.Column("admitted_by", sa.String(length=200), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("promised_at_s", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_s", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("placement_victims")
