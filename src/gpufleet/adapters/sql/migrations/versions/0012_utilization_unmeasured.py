"""A utilization record's ``gpu_util`` may be unknown (NULL): the GPUs a workload held were measured (from the
cluster's pods) but not how busy they were (no DCGM reading). The planning pass, the capacity forecast and the
budgets read ``gpus_allocated`` alone; the cost books count unmeasured time as neither busy nor idle.

Downgrading refuses a store that holds such records (the older schema cannot say "unknown", and writing a number
there would make one up): delete or re-ingest them with a measured utilization first.

Revision ID: 0012_utilization_unmeasured
Revises: 0011_capacity_block_purchases
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_utilization_unmeasured"
down_revision = "0011_capacity_block_purchases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("utilization") as batch:
        batch.alter_column("gpu_util", existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    unknown = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM utilization WHERE gpu_util IS NULL")).scalar_one()
    if unknown:
        raise RuntimeError(
            f"{unknown} utilization record(s) have no measured gpu_util; revision 0011 cannot store them. "
            "Delete them or re-ingest them with a measured gpu_util, then downgrade."
        )
    with op.batch_alter_table("utilization") as batch:
        batch.alter_column("gpu_util", existing_type=sa.Float(), nullable=False)
