"""gpufleet's tier choice at placement: checkpointed training goes to spot first, where spot is cheaper.

The fallback chains of place/ walk reserved -> on-demand -> spot -> secondary, the order of reliability. For
checkpointed training a spot preemption loses at most one checkpoint interval of work (the world restarts it
from its last checkpoint), while spot costs a fraction of on-demand (H100: $1.25 against $6.88 per GPU-hour):
so such a request tries the SKU's spot pool first (in stock, within its capacity) when spot is the cheaper
tier, and otherwise takes the inner chain's decision. Serving and uncheckpointed training never ride spot.

On nodes already running (:func:`running_tier_order`) gpufleet takes the cheapest room first: a pod takes room on a
running spot (checkpointed training only) or secondary node before room on an on-demand node when those are
cheaper, so the cheap nodes stay busy and the dear on-demand nodes are the ones that empty and are scaled down.

A serving replica is spread over nodes (:class:`ReplicaSpread`, the soft form of Kubernetes'
``topologySpreadConstraints`` on ``kubernetes.io/hostname`` with ``whenUnsatisfiable: ScheduleAnyway``): among the
nodes of the tier the placement chose, a node holding fewer than a cap of its fleet's replicas is preferred, so that
one node's failure takes at most about that share of the fleet. A preference only: when every fitting node of the
tier is at the cap the replica goes where it would have gone; it never waits and never launches a node for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from math import ceil

from gpufleet.domain.allocations import Allocation
from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.ports import PlacementRequest, Placer, PoolState

RELIABILITY_ORDER = (Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)
LAUNCHED = (Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)
UNPRICED = Decimal("Infinity")


def running_tier_order(cheapest_first: bool, checkpointed: bool, prices: Mapping[Tier, Decimal]) -> tuple[Tier, ...]:
    """The tiers a pod of one SKU may use, in the order placement tries running nodes. Reserved first (committed:
    paid whether used or not); spot only for checkpointed training. ``cheapest_first``: the launched tiers by
    price (``prices``, per GPU-hour), so that the dearest launched nodes are the ones that empty and are scaled
    down; otherwise the order of reliability (ties keep it too)."""
    launched = [t for t in LAUNCHED if checkpointed or t is not Tier.SPOT]
    if cheapest_first:  # a tier without a price sorts last
        launched.sort(key=lambda t: (prices.get(t, UNPRICED), RELIABILITY_ORDER.index(t)))
    return (Tier.RESERVED, *launched)


@dataclass(slots=True)
class SpotFirstForCheckpointed:
    inner: Placer
    # a launch for checkpointed training larger than the spot room: the whole nodes that fit go to spot (the
    # caller asks again for the rest), instead of the whole launch going down the chain
    split: bool = False

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
                per = request.gpus_per_node
                if self.split and cheaper and st.in_stock and room is not None and per > 0 and room >= per:
                    part = room // per * per
                    return Allocation(request.workload_id, st.pool.id, Tier.SPOT, part, "placed_spot_split")
        return self.inner.choose(request, pools)


@dataclass(frozen=True, slots=True)
class ReplicaSpread:
    """A serving fleet's replicas per node, kept under a cap (a preference, never a filter that refuses).

    ``share``: the cap is ``max(1, ceil(share * replicas))`` of a fleet of ``replicas`` (those it runs or asked
    for, the one being placed included): with 0.25 one node's failure takes at most about a quarter of the fleet."""

    share: float = 0.25
    # the tiers whose nodes it spreads over (empty: all); on launched tiers spreading may keep a node from emptying
    tiers: tuple[Tier, ...] = ()

    def applies(self, tier_rank: int) -> bool:
        """Whether a replica placed on the tier of this rank (``TIER_RANK``) is spread."""
        return not self.tiers or any(TIER_RANK[t] == tier_rank for t in self.tiers)

    def cap(self, replicas: int) -> int:
        return max(1, ceil(self.share * replicas))

    @staticmethod
    def pick(classes: Iterable[Iterable[int]], crowd: Mapping[int, int], cap: int) -> int | None:
        """The first node, over ``classes`` (fitting nodes grouped in the policy's order of preference, each group in
        its tie order), holding fewer than ``cap`` replicas of the fleet (``crowd``: node -> replicas on it; a node
        not in it holds none); None when every node offered holds ``cap`` or more (the caller keeps its choice)."""
        get = crowd.get
        for nodes in classes:
            for n in nodes:
                if get(n, 0) < cap:
                    return n
        return None
