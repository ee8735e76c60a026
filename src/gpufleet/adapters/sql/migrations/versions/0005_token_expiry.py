"""Bearer tokens expire: ``api_tokens.expires_at_s`` (UNIX seconds, nullable).

Tokens that exist before this revision get NULL, which means "never expires": upgrading must not lock
anyone out. New tokens get an expiry (``gpufleet token create --ttl``, default 90 days). Rotate old tokens
with ``gpufleet token create`` + ``gpufleet token revoke``.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("expires_at_s", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("expires_at_s")
