"""A utilization record may carry ``gpu_mem_gb``: the most GPU memory one replica (pod) of the workload used in the
bucket, summed over its GPUs (DCGM ``DCGM_FI_DEV_FB_USED``, MiB / 1024). NULL: not measured (every record before
this revision); rightsizing then keeps the replica's current GPU memory (docs/cost.md). Downgrading drops the column
and with it the measurements.

Revision ID: 0019_utilization_gpu_memory
Revises: 0018_placement_admissions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_utilization_gpu_memory"
down_revision = "0018_placement_admissions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("utilization") as batch:
        batch.add_column(sa.Column("gpu_mem_gb", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("utilization") as batch:
        batch.drop_column("gpu_mem_gb")
