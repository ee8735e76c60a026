"""An index on ``audit_events (action, at_s)``: the leader of ``gpufleet serve`` asks every ``leader_poll_s`` (1 s)
when the last planning pass was recorded (the newest ``reconciler.pass`` event: ``Reconciler.due``), and ``/metrics``
reads that event at every scrape; other services look events up by action and time (Capacity Block purchases, the
cluster feed's syncs). Without it each question read the whole append-only log (a million events: about 0.2 s on
PostgreSQL, every second; 0.6 ms with the index). Building it takes a SHARE lock on the table for its duration (writes
wait; the serving processes at the previous revision refuse them meanwhile anyway).

Revision ID: 0020_audit_action_index
Revises: 0019_utilization_gpu_memory
"""

from __future__ import annotations

from alembic import op

revision = "0020_audit_action_index"
down_revision = "0019_utilization_gpu_memory"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_action_at", "audit_events", ["action", "at_s"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_audit_action_at", table_name="audit_events")
