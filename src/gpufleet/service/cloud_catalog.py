"""Prices from the provider into the catalog (the ``pools`` table), through the cloud price port
(``adapters/price_port.py``: AWS's Price List API and spot price history, Azure's Retail Prices API, GCP's Cloud
Billing Catalog API).

Contract: ``sync`` writes, for each configured region that exists in the regions table and each SKU the provider
can price, the on-demand pool ``<provider>/<region>/<sku>/on_demand`` and the spot pool ``.../spot`` (created when
missing, with the catalog's default preemption rate), in USD per GPU-hour; a price the provider does not list
leaves the pool as it was. Every change is audited with the old and new price and where it was read.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, select

from gpufleet.adapters.price_port import CloudPrices
from gpufleet.adapters.sql.models import PoolRow, RegionRow, SkuRow
from gpufleet.domain.money import price_to_uusd, uusd_to_usd
from gpufleet.domain.pools import Tier
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.pool_prices import record_price_change
from gpufleet.service.uow import UnitOfWork

SPOT_PREEMPTION_RATE_PER_H = 0.05  # the catalog's default (domain.catalog.default_pools)

MAX_QUOTE_USD = Decimal(10_000)  # per GPU-hour: far above any GPU's price; above it a quote is a slip


class CloudCatalogService:
    def __init__(self, engine: Engine, clock: Clock, prices: CloudPrices) -> None:
        self._engine = engine
        self._clock = clock
        self._prices = prices

    def sync(self, actor: Actor, *, sku_id: str | None = None) -> dict[str, Any]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        now_s = self._clock.now_s()
        provider = self._prices.provider
        with UnitOfWork(self._engine, write=False) as uow:
            regions = [r for r in self._prices.regions if uow.session.get(RegionRow, r) is not None]
            priced = self._prices.skus()
            skus = [s for s in uow.session.scalars(select(SkuRow.id)).all() if s in priced]
        if sku_id is not None:
            skus = [s for s in skus if s == sku_id]
        quoted = [
            (region, sku, Tier(q.tier), q.usd_per_gpu_h, q.source)
            for region in regions
            for sku in sorted(skus)
            for q in self._prices.quotes(region, sku, now_s=now_s)
        ]
        # a provider's zero, negative or absurd quote (a free-tier row, a parse slip) never replaces a catalog price
        prices = [p for p in quoted if p[3].is_finite() and 0 < p[3] <= MAX_QUOTE_USD]
        skipped = [{"pool": f"{provider}/{r}/{s}/{t.value}", "usd_per_gpu_h": str(u), "source": src}
                   for r, s, t, u, src in quoted if (r, s, t, u, src) not in prices]  # fmt: skip
        changed = []
        with UnitOfWork(self._engine, write=True) as uow:
            for region, sku, tier, usd, source in prices:
                pool_id = f"{provider}/{region}/{sku}/{tier.value}"
                row = uow.session.scalar(uow.lock(select(PoolRow).where(PoolRow.id == pool_id)))
                new_uusd = price_to_uusd(usd)
                old = None if row is None else uusd_to_usd(row.price_uusd_per_gpu_h)
                if row is None:
                    row = PoolRow(
                        id=pool_id,
                        provider_id=provider,
                        region_id=region,
                        sku_id=sku,
                        tier=tier.value,
                        price_uusd_per_gpu_h=new_uusd,
                        term_months=0,
                        lead_time_s=0,
                        quota_gpus=None,
                        allocated_gpus=0,
                        preemption_rate_per_h=SPOT_PREEMPTION_RATE_PER_H if tier is Tier.SPOT else 0.0,
                    )
                    uow.session.add(row)
                elif row.price_uusd_per_gpu_h == new_uusd:
                    continue
                else:  # the hours before now keep the old price (service/pool_prices.py)
                    record_price_change(uow, pool_id, row.price_uusd_per_gpu_h, new_uusd, now_s)
                    row.price_uusd_per_gpu_h = new_uusd
                entry = {
                    "pool": pool_id,
                    "tier": tier.value,
                    "old_usd_per_gpu_h": None if old is None else str(old),
                    "usd_per_gpu_h": str(uusd_to_usd(new_uusd)),
                    "source": source,
                }
                uow.audit(
                    at_s=now_s,
                    actor=actor.user_id,
                    action="pool.price_synced",
                    entity="pool",
                    entity_id=pool_id,
                    detail=entry,
                )
                changed.append(entry)
            uow.commit()
        return {"regions": regions, "prices_read": len(quoted), "changed": changed, "skipped": skipped}
