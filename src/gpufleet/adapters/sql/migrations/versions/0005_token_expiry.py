"""Bearer tokens expire: ``api_tokens.expires_at_s`` (UNIX seconds, nullable).

Tokens that exist before this revision get NULL, which means "never expires": upgrading must not lock
anyone out. New tokens get an expiry (``gpufleet token create --ttl``, default 90 days). Rotate old tokens
with ``gpufleet token create`` + ``gpufleet token revoke``.

Downgrading refuses while a token that is not revoked has an expiry (the older schema would let it live for ever).

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
    expiring = (
        op.get_bind()
        .execute(sa.text("SELECT COUNT(*) FROM api_tokens WHERE expires_at_s IS NOT NULL AND NOT revoked"))
        .scalar_one()
    )
    if expiring:
        raise RuntimeError(
            f"{expiring} token(s) have an expiry; revision 0004 cannot store it and they would never expire. "
            "Revoke them (gpufleet token revoke), then downgrade."
        )
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("expires_at_s")
