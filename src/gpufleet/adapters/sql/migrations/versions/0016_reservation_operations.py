"""A reservation's order while the provider still works on it, and the provider's reason for its status:
``reservations.provider_operation_id`` (the provider operation still running when the order was submitted, GCP's
zonal insert: the reconciler reads its outcome, so an insert that fails after it was answered is placed again or
held rather than read as an order someone deleted) and ``reservations.status_reason`` (why the provider put the
reservation in its status: the refusal a ``blocked`` reservation waits on, the code that cancelled it). The status
``blocked`` needs no schema change (``status`` is a string the domain's table guards).

Downgrading drops both columns and puts ``blocked`` reservations back to ``approved`` (the older code tries those on
each pass too).

Revision ID: 0016_reservation_operations
Revises: 0015_leader_fence
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_reservation_operations"
down_revision = "0015_leader_fence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reservations") as batch:
        batch.add_column(sa.Column("provider_operation_id", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("status_reason", sa.String(length=500), nullable=True))


def downgrade() -> None:
    op.execute(sa.text("UPDATE reservations SET status = 'approved' WHERE status = 'blocked'"))
    with op.batch_alter_table("reservations") as batch:
        batch.drop_column("status_reason")
        batch.drop_column("provider_operation_id")
