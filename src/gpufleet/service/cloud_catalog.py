"""Prices from the provider into the catalog (the ``pools`` table): AWS on-demand list prices (Price List API)
and spot prices (the latest spot price history per availability zone; the pool's price is their median).

Contract: ``sync`` writes, for each configured region that exists in the regions table and each SKU with an EC2
instance type, the on-demand pool ``aws/<region>/<sku>/on_demand`` and the spot pool ``aws/<region>/<sku>/spot``
(created when missing, with the catalog's default preemption rate), in USD per GPU-hour; a price the provider
does not list leaves the pool as it was. Every change is audited with the old and new price.
"""

from __future__ import annotations

import statistics
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select

from gpufleet.adapters.aws.skus import INSTANCE_TYPES
from gpufleet.adapters.sql.models import PoolRow, RegionRow, SkuRow
from gpufleet.domain.money import price_to_uusd, uusd_to_usd
from gpufleet.domain.pools import Tier
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.adapters.aws.world import AwsWorld

SPOT_PREEMPTION_RATE_PER_H = 0.05  # the catalog's default (domain.catalog.default_pools)
SPOT_LOOKBACK_S = 7 * 86400


class CloudCatalogService:
    def __init__(self, engine: Engine, clock: Clock, world: AwsWorld) -> None:
        self._engine = engine
        self._clock = clock
        self._world = world

    def sync(self, actor: Actor, *, sku_id: str | None = None) -> dict[str, Any]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            regions = [r for r in self._world.config.regions if uow.session.get(RegionRow, r) is not None]
            skus = [s for s in uow.session.scalars(select(SkuRow.id)).all() if s in INSTANCE_TYPES]
        if sku_id is not None:
            skus = [s for s in skus if s == sku_id]
        prices: list[tuple[str, str, Tier, Decimal, str]] = []
        for region in regions:
            for sku in sorted(skus):
                od = self._world.prices.on_demand_usd_per_gpu_h(region, sku)
                if od is not None:
                    prices.append((region, sku, Tier.ON_DEMAND, od, "pricing:GetProducts"))
                spot = self._world.prices.spot_usd_per_gpu_h(region, sku, since_s=now_s - SPOT_LOOKBACK_S)
                if spot:
                    median = Decimal(str(statistics.median(p.usd_per_gpu_h for p in spot)))
                    prices.append((region, sku, Tier.SPOT, median, f"ec2:DescribeSpotPriceHistory ({len(spot)} AZs)"))
        changed = []
        with UnitOfWork(self._engine, write=True) as uow:
            for region, sku, tier, usd, source in prices:
                pool_id = f"aws/{region}/{sku}/{tier.value}"
                row = uow.session.get(PoolRow, pool_id)
                new_uusd = price_to_uusd(usd)
                old = None if row is None else uusd_to_usd(row.price_uusd_per_gpu_h)
                if row is None:
                    row = PoolRow(
                        id=pool_id,
                        provider_id="aws",
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
                else:
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
        return {"regions": regions, "prices_read": len(prices), "changed": changed}
