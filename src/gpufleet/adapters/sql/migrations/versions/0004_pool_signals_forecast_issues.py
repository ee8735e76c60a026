"""Placement signals per pool (stockout, expected queue wait) and the served capacity forecasts with their
issue time, for forecast accuracy tracking.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_signals",
        sa.Column("pool_id", sa.String(length=200), sa.ForeignKey("pools.id"), primary_key=True),
        sa.Column("stockout", sa.Boolean(), nullable=False),
        sa.Column("queue_wait_s", sa.Integer(), nullable=True),
        sa.Column("updated_at_s", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "forecast_issues",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("series_id", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("issued_at_s", sa.BigInteger(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=False),
        sa.Column("step_s", sa.Integer(), nullable=False),
        sa.Column("scale", sa.Float(), nullable=False),
        sa.Column("quantiles_json", sa.Text(), nullable=False),
        sa.Column("values_json", sa.Text(), nullable=False),
    )
    op.create_index("ix_forecast_issues_series_time", "forecast_issues", ["series_id", "issued_at_s"])


def downgrade() -> None:
    op.drop_index("ix_forecast_issues_series_time", table_name="forecast_issues")
    op.drop_table("forecast_issues")
    op.drop_table("pool_signals")
