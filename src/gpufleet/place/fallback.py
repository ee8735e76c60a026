"""Baseline placement: walk the fallback chain reserved -> on-demand -> spot -> secondary -> queue.

Spot is only for checkpointable training; serving never rides preemptible capacity. An exhausted pool is
never an error: the next link is tried and the reason recorded; the end of the chain is the queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.domain.allocations import Allocation, FallbackStep
from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.ports import PlacementRequest, PoolState


def headroom_gpus(state: PoolState) -> int | None:
    if state.capacity_gpus is None:
        return None
    return state.capacity_gpus - state.gpus_in_use


class FallbackChain:
    """Choose the first pool of the request's SKU, in tier order, that can take ``request.gpus`` now."""

    def choose(self, request: PlacementRequest, pools: Sequence[PoolState]) -> Allocation:
        steps: list[FallbackStep] = []
        candidates = sorted(
            (p for p in pools if p.pool.sku_id == request.sku_id), key=lambda p: (TIER_RANK[p.pool.tier], p.pool.id)
        )
        for st in candidates:
            pool = st.pool
            if request.launchable_tiers_only and pool.tier is Tier.RESERVED:
                steps.append(FallbackStep(pool.id, pool.tier, "reserved_not_launchable"))
                continue
            if not pool.allows(checkpointable=request.checkpointable, serving=request.serving):
                steps.append(
                    FallbackStep(
                        pool.id, pool.tier, "serving_never_on_spot" if request.serving else "not_checkpointable"
                    )
                )
                continue
            if not st.in_stock:
                steps.append(FallbackStep(pool.id, pool.tier, "stockout"))
                continue
            room = headroom_gpus(st)
            if room is not None and room < request.gpus:
                steps.append(FallbackStep(pool.id, pool.tier, "quota_exhausted"))
                continue
            return Allocation(
                request.workload_id, pool.id, pool.tier, request.gpus, f"placed_{pool.tier.value}", tuple(steps)
            )
        steps.append(FallbackStep(None, None, "queue"))
        return Allocation(request.workload_id, None, None, request.gpus, "queued_all_pools_exhausted", tuple(steps))
