"""Append-only audit log (triggers refuse UPDATE/DELETE) and the built-in catalog (SKUs, providers, regions,
the four pools per SKU in us-east-1, priced from ``gpufleet.domain.catalog``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpufleet.domain.catalog import BUILTIN_PROVIDERS, BUILTIN_REGIONS, LIST_PRICES, default_pools
from gpufleet.domain.skus import BUILTIN_SKUS

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_PG_FN = """
CREATE FUNCTION gpufleet_audit_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'audit_events is append-only';
END;
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(_PG_FN)
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_no_{verb.lower()} BEFORE {verb} ON audit_events "
                "FOR EACH ROW EXECUTE FUNCTION gpufleet_audit_append_only()"
            )
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_no_{verb.lower()} BEFORE {verb} ON audit_events "
                "BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END"
            )

    # lightweight table clauses (no reflection): the columns this revision writes, as 0001 created them
    skus = sa.table(
        "skus",
        *(
            sa.column(c)
            for c in (
                "id",
                "name",
                "memory_gb",
                "gpus_per_node",
                "cpu_per_node",
                "mem_gb_per_node",
                "interconnect",
                "relative_throughput",
            )
        ),
    )
    providers = sa.table("providers", sa.column("id"), sa.column("name"), sa.column("kind"))
    regions = sa.table("regions", sa.column("id"), sa.column("provider_id"), sa.column("geo"))
    pools = sa.table(
        "pools",
        *(
            sa.column(c)
            for c in (
                "id",
                "provider_id",
                "region_id",
                "sku_id",
                "tier",
                "price_uusd_per_gpu_h",
                "term_months",
                "lead_time_s",
                "quota_gpus",
                "allocated_gpus",
                "preemption_rate_per_h",
            )
        ),
    )
    op.bulk_insert(
        skus,
        [
            {
                "id": s.id,
                "name": s.name,
                "memory_gb": s.memory_gb,
                "gpus_per_node": s.gpus_per_node,
                "cpu_per_node": s.cpu_per_node,
                "mem_gb_per_node": s.mem_gb_per_node,
                "interconnect": s.interconnect,
                "relative_throughput": s.relative_throughput,
            }
            for s in BUILTIN_SKUS
        ],
    )
    op.bulk_insert(providers, [{"id": p.id, "name": p.name, "kind": p.kind} for p in BUILTIN_PROVIDERS])
    op.bulk_insert(regions, [{"id": r.id, "provider_id": r.provider_id, "geo": r.geo} for r in BUILTIN_REGIONS])
    rows = []
    for price in LIST_PRICES:
        for pool in default_pools(price.sku_id):
            rows.append(
                {
                    "id": pool.id,
                    "provider_id": pool.provider_id,
                    "region_id": pool.region_id,
                    "sku_id": pool.sku_id,
                    "tier": pool.tier.value,
                    "price_uusd_per_gpu_h": pool.price_uusd_per_gpu_h,
                    "term_months": pool.term_months,
                    "lead_time_s": pool.lead_time_s,
                    "quota_gpus": pool.quota_gpus,
                    "allocated_gpus": 0,
                    "preemption_rate_per_h": pool.preemption_rate_per_h,
                }
            )
    op.bulk_insert(pools, rows)


def downgrade() -> None:
    bind = op.get_bind()
    op.execute("DELETE FROM pools")
    op.execute("DELETE FROM regions")
    op.execute("DELETE FROM providers")
    op.execute("DELETE FROM skus")
    for verb in ("update", "delete"):
        if bind.dialect.name == "postgresql":
            op.execute(f"DROP TRIGGER audit_no_{verb} ON audit_events")
        else:
            op.execute(f"DROP TRIGGER audit_no_{verb}")
    if bind.dialect.name == "postgresql":
        op.execute("DROP FUNCTION gpufleet_audit_append_only()")
