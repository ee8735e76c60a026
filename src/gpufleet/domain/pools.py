"""Providers, regions and capacity pools.

A capacity pool is where GPU-hours are bought: one provider, one region, one SKU, one tier.
Tiers in the order the fallback chain tries them: reserved -> on_demand -> spot -> secondary.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from gpufleet.domain.money import price_to_uusd


class Tier(StrEnum):
    RESERVED = "reserved"  # committed for a term, paid whether used or not
    ON_DEMAND = "on_demand"  # pay per use, bounded by quota, can stock out
    SPOT = "spot"  # cheap, preemptible: checkpointable training only, never serving
    SECONDARY = "secondary"  # neocloud providers: own capacity ceilings and lead times


TIER_ORDER: tuple[Tier, ...] = (Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)
TIER_RANK: dict[Tier, int] = {t: i for i, t in enumerate(TIER_ORDER)}
# the taint that keeps work off spot capacity unless it tolerates it (checkpointable training only): key, value,
# effect. Kubernetes' fleet objects put it on spot NodePools and flavors; the simulator's cluster view shows it too
SPOT_NODE_TAINT: tuple[str, str, str] = ("gpufleet.io/spot", "true", "NoSchedule")


@dataclass(frozen=True, slots=True)
class Provider:
    id: str
    name: str
    kind: str  # "hyperscaler" | "neocloud" | "owned"


@dataclass(frozen=True, slots=True)
class Region:
    id: str
    provider_id: str
    geo: str


@dataclass(frozen=True, slots=True)
class CapacityPool:
    """One place to buy GPU-hours.

    Attributes (units in names):
      price_usd_per_gpu_h: list price (for reserved: the effective hourly price over the term).
      term_months: commitment term for reserved pools (0 for pay-per-use tiers).
      lead_time_s: time from an order to usable capacity (reservations, secondary providers).
      quota_gpus: the most GPUs this pool will give us at once (None = unbounded).
      preemption_rate_per_h: chance per node-hour that the provider takes a node back (spot).
      node_start_s: time for a node to boot and join the cluster once capacity is granted.
      min_billing_s: billing granularity for a launched node.
    """

    id: str
    provider_id: str
    region_id: str
    sku_id: str
    tier: Tier
    price_usd_per_gpu_h: Decimal
    term_months: int = 0
    lead_time_s: int = 0
    quota_gpus: int | None = None
    preemption_rate_per_h: float = 0.0
    node_start_s: int = 600
    min_billing_s: int = 60

    @property
    def price_uusd_per_gpu_h(self) -> int:
        return price_to_uusd(self.price_usd_per_gpu_h)

    @property
    def preemptible(self) -> bool:
        return self.tier is Tier.SPOT or self.preemption_rate_per_h > 0.0

    def allows(self, *, checkpointable: bool, serving: bool) -> bool:
        """Spot carries only checkpointable training; serving never rides preemptible capacity."""
        if self.preemptible:
            return checkpointable and not serving
        return True
