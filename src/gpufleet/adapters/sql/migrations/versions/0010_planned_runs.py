"""The planned-run calendar: ``planned_runs`` (a team's large training run registered ahead of time: SKU,
region, GPUs, start, duration, probability; cancelled runs keep their row with ``cancelled_at_s`` set). A team's
run name is unique among its runs that are not cancelled (a partial unique index on both backends).

Revision ID: 0010_planned_runs
Revises: 0009_audit_and_usage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_planned_runs"
down_revision = "0009_audit_and_usage"
branch_labels = None
depends_on = None

_ACTIVE = sa.text("cancelled_at_s IS NULL")


def upgrade() -> None:
    op.create_table(
        "planned_runs",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("team_id", sa.String(length=64), sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("sku_id", sa.String(length=64), sa.ForeignKey("skus.id"), nullable=False),
        sa.Column("region_id", sa.String(length=64), sa.ForeignKey("regions.id"), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=False),
        sa.Column("duration_s", sa.BigInteger(), nullable=False),
        sa.Column("probability", sa.Float(), nullable=False),
        sa.Column("registered_s", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("cancelled_at_s", sa.BigInteger(), nullable=True),
        sa.Column("cancelled_by", sa.String(length=128), nullable=True),
    )
    op.create_index("ix_planned_runs_sku_region", "planned_runs", ["sku_id", "region_id"])
    op.create_index(
        "uq_planned_runs_team_name_active",
        "planned_runs",
        ["team_id", "name"],
        unique=True,
        sqlite_where=_ACTIVE,
        postgresql_where=_ACTIVE,
    )


def downgrade() -> None:
    op.drop_index("uq_planned_runs_team_name_active", table_name="planned_runs")
    op.drop_index("ix_planned_runs_sku_region", table_name="planned_runs")
    op.drop_table("planned_runs")
