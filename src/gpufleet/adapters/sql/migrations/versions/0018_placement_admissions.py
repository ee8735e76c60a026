"""Idempotency keys of admissions: ``placement_admissions`` holds one row per (caller, ``Idempotency-Key``) that an
admission (``POST /v1/placement/recommendations`` with ``admit: true``) was sent under: the fingerprint of the request
it is bound to, the pool it booked in (null: nothing booked, it queued) and its answer (``answer_json``; null only
while the answer of a booking is being written). A retry under the same key returns that answer and books nothing
again. Nothing to migrate: no key was recorded before.

Revision ID: 0018_placement_admissions
Revises: 0017_placement_victims
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_placement_admissions"
down_revision = "0017_placement_victims"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "placement_admissions",
        sa.Column("admitted_by", sa.String(length=200), primary_key=True),
        sa.Column("client_key", sa.String(length=64), primary_key=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("pool_id", sa.String(length=200), nullable=True),
        sa.Column("created_at_s", sa.BigInteger(), nullable=False),
        sa.Column("answer_json", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("placement_admissions")
