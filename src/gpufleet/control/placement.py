"""gpufleet's tier choice at placement: checkpointed training goes to spot first, where spot is cheaper.

The fallback chains of place/ walk reserved -> on-demand -> spot -> secondary, the order of reliability. For
checkpointed training a spot preemption loses at most one checkpoint interval of work (the world restarts it
from its last checkpoint), while spot costs a fraction of on-demand (H100: $1.25 against $6.88 per GPU-hour):
so such a request tries the SKU's spot pool first (in stock, within its capacity) when spot is the cheaper
tier, and otherwise takes the inner chain's decision. Serving and uncheckpointed training never ride spot.

The same order holds on nodes already running (:func:`checkpointed_tier_order`): a checkpointed pod takes room
on a spot node before room on an on-demand node, so spot nodes stay busy and the dearer on-demand nodes are the
ones that empty and are scaled down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.domain.allocations import Allocation
from gpufleet.domain.pools import Tier
from gpufleet.ports import PlacementRequest, Placer, PoolState

RELIABILITY_ORDER = (Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)
SPOT_FIRST_ORDER = (Tier.RESERVED, Tier.SPOT, Tier.ON_DEMAND, Tier.SECONDARY)


def checkpointed_tier_order(
    spot_first: bool, spot_usd_per_gpu_h: Decimal, on_demand_usd_per_gpu_h: Decimal
) -> tuple[Tier, ...]:
    """The order in which checkpointed training tries the tiers of one SKU on running nodes: spot before on demand
    when the loop places checkpointed work spot first and spot is the cheaper tier, else the order of reliability."""
    if spot_first and spot_usd_per_gpu_h < on_demand_usd_per_gpu_h:
        return SPOT_FIRST_ORDER
    return RELIABILITY_ORDER


@dataclass(slots=True)
class SpotFirstForCheckpointed:
    inner: Placer

    def choose(self, request: PlacementRequest, pools: Sequence[PoolState]) -> Allocation:
        if request.checkpointable and not request.serving:
            mine = [p for p in pools if p.pool.sku_id == request.sku_id]
            spot = [p for p in mine if p.pool.tier is Tier.SPOT]
            od = [p.pool.price_usd_per_gpu_h for p in mine if p.pool.tier is Tier.ON_DEMAND]
            for st in spot:
                room = None if st.capacity_gpus is None else st.capacity_gpus - st.gpus_in_use
                cheaper = not od or st.pool.price_usd_per_gpu_h < min(od)
                if cheaper and st.in_stock and (room is None or room >= request.gpus):
                    return Allocation(request.workload_id, st.pool.id, Tier.SPOT, request.gpus, "placed_spot_cheapest")
        return self.inner.choose(request, pools)
