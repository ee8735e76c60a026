"""An admission can be released (``DELETE /v1/placement/admissions/{key}``): ``placement_admissions`` keeps, with an
admission's key, what releasing it gives back: ``taken_gpus`` (the GPUs it added to its pool's ``allocated_gpus``;
null: nothing taken, or recorded before this revision), ``commitment_id`` (its budget commitment, ended at the
release; null: none) and ``release_json`` (the release's answer, null until released: a second release answers the
same). Rows recorded before this revision release no GPUs and no commitment (what they took is not known), only their
victims. Downgrading drops the columns.

Revision ID: 0021_placement_admission_release
Revises: 0020_audit_action_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_placement_admission_release"
down_revision = "0020_audit_action_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("placement_admissions") as batch:
        batch.add_column(sa.Column("taken_gpus", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("commitment_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("release_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("placement_admissions") as batch:
        batch.drop_column("release_json")
        batch.drop_column("commitment_id")
        batch.drop_column("taken_gpus")
