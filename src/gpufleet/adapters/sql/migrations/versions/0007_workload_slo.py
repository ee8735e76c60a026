"""A serving workload's latency SLO and per-replica concurrency limit, read by its replica autoscaler:
``workloads.slo_s`` (queue-wait SLO, seconds) and ``workloads.max_concurrency`` (requests one replica serves at
once, e.g. 1 for an un-batched model). Both nullable: unset keeps the autoscaler as before.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("slo_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("max_concurrency", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("max_concurrency")
        batch.drop_column("slo_s")
