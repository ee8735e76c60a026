"""A pool's past prices: ``pool_prices`` holds one row per price change (the price the pool charged up to the change),
so that the books and the budgets charge each hour at the price of its moment instead of re-pricing the past when
a pool's price changes. A store migrated from 0012 has no history: its pools charge their current price at every
moment, as before, until their first change.

Downgrading drops the history (the older schema has nowhere to keep it; the books then re-price the past again).

Revision ID: 0013_pool_price_history
Revises: 0012_utilization_unmeasured
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_pool_price_history"
down_revision = "0012_utilization_unmeasured"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_prices",
        sa.Column("pool_id", sa.String(length=200), sa.ForeignKey("pools.id"), primary_key=True),
        sa.Column("until_s", sa.BigInteger(), primary_key=True),
        sa.Column("price_uusd_per_gpu_h", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pool_prices")
