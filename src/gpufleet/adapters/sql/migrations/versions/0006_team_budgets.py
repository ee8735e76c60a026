"""Team budgets enforced at admission: ``team_budgets`` (one per team: limit, calendar period, enforce, alert
thresholds) and ``budget_commitments`` (the expected spend of work admitted against a budget).

Downgrading refuses while a team budget exists (it would vanish without a word); its commitments go with the table.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "team_budgets",
        sa.Column("team_id", sa.String(length=64), sa.ForeignKey("teams.id"), primary_key=True),
        sa.Column("limit_cents", sa.BigInteger(), nullable=False),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("enforce", sa.Boolean(), nullable=False),
        sa.Column("alert_at_json", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at_s", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
    )
    op.create_table(
        "budget_commitments",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("team_id", sa.String(length=64), sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("created_at_s", sa.BigInteger(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=False),
        sa.Column("end_s", sa.BigInteger(), nullable=False),
        sa.Column("rate_uusd_per_h", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("pool_id", sa.String(length=200), nullable=True),
    )
    op.create_index("ix_budget_commitments_team_end", "budget_commitments", ["team_id", "end_s"])


def downgrade() -> None:
    budgets = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM team_budgets")).scalar_one()
    if budgets:
        raise RuntimeError(
            f"{budgets} team budget(s) exist; revision 0005 has no budgets and would admit work unchecked. "
            "Delete them (DELETE /v1/teams/{team}/budget), then downgrade."
        )
    op.drop_index("ix_budget_commitments_team_end", table_name="budget_commitments")
    op.drop_table("budget_commitments")
    op.drop_table("team_budgets")
