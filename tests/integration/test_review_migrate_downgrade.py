"""Review (migrate): schema downgrades (alembic's ``command.downgrade``; ``gpufleet db`` has no downgrade command)
must not drop data silently. Migration 0012 sets the rule: its downgrade refuses while records exist that the older
schema cannot hold. The downgrades of 0005 (token expiry), 0006 (team budgets) and 0011 (Capacity Block purchases)
dropped theirs without a word: after ``downgrade 0004`` a token issued for 90 days never expires; after ``downgrade
0005`` every enforced team budget is gone; after ``downgrade 0010`` the record of a bought Capacity Block (its
upfront fee, its approvers, its capacity reservation id) is gone."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text

from gpufleet.adapters.sql import migrate
from tests.integration.conftest import NOW_S, Database

CASES = {
    "0004": (
        "INSERT INTO api_tokens (id, token_hash, user_id, role, team_id, created_at_s, revoked, expires_at_s) "
        f"VALUES ('tok-exp', '{'a' * 64}', 'dave', 'viewer', NULL, {NOW_S}, false, {NOW_S + 86_400})",
        "api_tokens",
        "token",
    ),
    "0005": (
        "INSERT INTO team_budgets (team_id, limit_cents, period, enforce, alert_at_json, version, updated_at_s, "
        f"updated_by) VALUES ('team-dg', 100000, 'month', true, '[]', 1, {NOW_S}, 'erin')",
        "team_budgets",
        "budget",
    ),
    "0010_planned_runs": (
        "INSERT INTO capacity_block_purchases (id, offering_id, region_id, sku_id, gpus, duration_h, start_after_s, "
        "end_before_s, instance_type, availability_zone, instance_count, start_s, end_s, upfront_fee_uusd, currency, "
        "budget_code, status, version, approvals_required, created_by, created_at_s, purchase_key, "
        "capacity_reservation_id) VALUES ('cbp-dg', 'cb-1', 'us-east-1', 'h100_80gb', 8, 24, 0, 1, 'p5.48xlarge', "
        "'us-east-1a', 1, 0, 1, 31000000000, 'USD', 'ML', 'purchased', 3, 2, 'alice', 0, 'gpufleet-cb-cb-1', "
        "'cr-0123')",
        "capacity_block_purchases",
        "purchase",
    ),
}


def _downgrade(db: Database, revision: str) -> None:
    cfg = migrate.alembic_config(db.engine)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


@pytest.mark.parametrize("target", list(CASES))
def test_a_downgrade_refuses_while_it_would_drop_data(database: Database, target: str) -> None:
    """Review (fixed), the defect: the downgrade below the revision that added the rows' table (or column) ran and dropped them.
    Expected, as 0012 does: refused with the number of records and what to do, the store unchanged at head."""
    insert, table, word = CASES[target]
    with database.engine.begin() as conn:
        if target == "0005":
            conn.execute(text("INSERT INTO teams (id, name) VALUES ('team-dg', 'Downgrade team')"))
        conn.execute(text(insert))
    with pytest.raises(RuntimeError, match=word):
        _downgrade(database, target)
    assert migrate.current_revision(database.engine) == migrate.head_revision(database.engine)
    with database.engine.connect() as conn:
        assert conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one() == 1
