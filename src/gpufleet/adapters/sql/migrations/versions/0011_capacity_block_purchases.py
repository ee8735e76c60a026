"""Capacity Block purchases above the spend threshold: ``capacity_block_purchases`` (the request: the offering,
the search it was listed under, its upfront fee in exact micro-dollars, the budget code, the requester, the status
with a ``version`` for conditional updates, and the capacity reservation once bought) and
``capacity_block_approvals`` (one row per approver: the primary key makes "the same user approves twice"
impossible even under races). An offering has at most one open request (``pending_approval`` or ``approved``): a
partial unique index on both backends. On PostgreSQL the service role's grants on the new tables come from the
default privileges migration 0009 set for tables the migrating owner creates (``adapters/sql/roles.py``).

Downgrading refuses while a purchase request exists (the record of a bought block and its approvals would be lost).

Revision ID: 0011_capacity_block_purchases
Revises: 0010_planned_runs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_capacity_block_purchases"
down_revision = "0010_planned_runs"
branch_labels = None
depends_on = None

_OPEN = sa.text("status IN ('pending_approval', 'approved')")


def upgrade() -> None:
    op.create_table(
        "capacity_block_purchases",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column("offering_id", sa.String(length=64), nullable=False),
        sa.Column("region_id", sa.String(length=64), nullable=False),
        sa.Column("sku_id", sa.String(length=64), sa.ForeignKey("skus.id"), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("duration_h", sa.Integer(), nullable=False),
        sa.Column("start_after_s", sa.BigInteger(), nullable=False),
        sa.Column("end_before_s", sa.BigInteger(), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("availability_zone", sa.String(length=64), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=False),
        sa.Column("end_s", sa.BigInteger(), nullable=False),
        sa.Column("upfront_fee_uusd", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("budget_code", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("approvals_required", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at_s", sa.BigInteger(), nullable=False),
        sa.Column("purchase_key", sa.String(length=128), nullable=False),
        sa.Column("capacity_reservation_id", sa.String(length=128), nullable=True),
    )
    op.create_index("ix_cb_purchases_status", "capacity_block_purchases", ["status"])
    op.create_index(
        "uq_cb_purchases_offering_open",
        "capacity_block_purchases",
        ["offering_id"],
        unique=True,
        sqlite_where=_OPEN,
        postgresql_where=_OPEN,
    )
    op.create_table(
        "capacity_block_approvals",
        sa.Column("purchase_id", sa.String(length=64), sa.ForeignKey("capacity_block_purchases.id"), primary_key=True),
        sa.Column("user_id", sa.String(length=128), primary_key=True),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("budget_code", sa.String(length=64), nullable=False),
        sa.Column("at_s", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    purchases = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM capacity_block_purchases")).scalar_one()
    if purchases:
        raise RuntimeError(
            f"{purchases} Capacity Block purchase request(s) exist (with their fees, approvals and capacity "
            "reservations); revision 0010 has nowhere to keep them. Export and delete them, then downgrade."
        )
    op.drop_table("capacity_block_approvals")
    op.drop_index("uq_cb_purchases_offering_open", table_name="capacity_block_purchases")
    op.drop_index("ix_cb_purchases_status", table_name="capacity_block_purchases")
    op.drop_table("capacity_block_purchases")
