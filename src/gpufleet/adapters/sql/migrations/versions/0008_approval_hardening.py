"""Approval hardening: what a reservation's Idempotency-Key was first used with, multi-region groups, and an
index for the requester's rolling-window commitments.

- ``reservations.request_fingerprint``: SHA-256 of the normalized proposal (SKU, units, start, term, regions)
  the creator's Idempotency-Key was first used with; the same key with another proposal is refused.
- ``reservations.group_id``: the id of the group's head reservation when one proposal names several regions
  (units are split across them, one row per region); NULL for a single-region reservation.
- ``ix_reservations_creator_created``: the requester's reservations in the approval window.
- ``ix_util_team_time``: a team's utilization in its budget window (read by every budget admission).

Revision ID: 0008_approval_hardening
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_approval_hardening"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reservations") as batch:
        batch.add_column(sa.Column("request_fingerprint", sa.String(64), nullable=True))
        batch.add_column(sa.Column("group_id", sa.String(64), nullable=True))
        batch.create_index("ix_reservations_creator_created", ["created_by", "created_at_s"])
        batch.create_index("ix_reservations_group", ["group_id"])
    op.create_index("ix_util_team_time", "utilization", ["team_id", "bucket_start_s"])


def downgrade() -> None:
    op.drop_index("ix_util_team_time", table_name="utilization")
    with op.batch_alter_table("reservations") as batch:
        batch.drop_index("ix_reservations_group")
        batch.drop_index("ix_reservations_creator_created")
        batch.drop_column("group_id")
        batch.drop_column("request_fingerprint")
