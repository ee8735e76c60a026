"""The ``Placer`` port implemented with :func:`gpufleet.place.degrade.recommend`.

Maps the port's pool states (in use, capacity, in stock) onto placement's (free GPUs, utilization,
stockout) and the request onto a minimal workload, then returns the decision as an ``Allocation`` with
the skipped links as its fallback steps. A provider share cap can be set; it is counted over the GPUs
in use in the pools given. Never raises for an exhausted pool: the end of the chain is the queue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.domain.allocations import Allocation, FallbackStep
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import Priority, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, PoolHeadroom, recommend
from gpufleet.ports import PlacementRequest, PoolState


@dataclass(slots=True)
class DegradingChain:
    max_provider_share: float = 1.0
    utilization_high: float = 1.0  # the port gives no pool size beyond quota: off by default

    def choose(self, request: PlacementRequest, pools: Sequence[PoolState]) -> Allocation:
        skipped: list[FallbackStep] = []
        states: list[PoolHeadroom] = []
        in_use: dict[str, float] = {}
        for st in pools:
            in_use[st.pool.provider_id] = in_use.get(st.pool.provider_id, 0.0) + st.gpus_in_use
            if st.pool.sku_id != request.sku_id:
                continue
            if request.launchable_tiers_only and st.pool.tier is Tier.RESERVED:
                skipped.append(FallbackStep(st.pool.id, st.pool.tier, "reserved_not_launchable"))
                continue
            free = math.inf if st.capacity_gpus is None else float(st.capacity_gpus - st.gpus_in_use)
            util = 0.0 if not st.capacity_gpus else st.gpus_in_use / st.capacity_gpus
            states.append(PoolHeadroom(st.pool, free, utilization=util, stockout=not st.in_stock))
        workload = Workload(
            request.workload_id,
            request.workload_id,
            WorkloadKind.SERVING if request.serving else WorkloadKind.TRAINING,
            "",
            "",
            Priority.CRITICAL if request.serving else Priority.NORMAL,
            (request.sku_id,),
            request.gpus,
            checkpoint_interval_s=3600 if request.checkpointable and not request.serving else None,
        )
        d = recommend(
            DegradeRequest(
                workload,
                0,
                tuple(states),
                provider_gpus_in_use=in_use,
                max_provider_share=self.max_provider_share,
                utilization_high=self.utilization_high if self.utilization_high < 1.0 else math.inf,
            )
        )
        steps = tuple(skipped) + d.skipped
        if d.action == "place" and d.pool_id is not None:
            tier = Tier(d.tier) if d.tier else None
            return Allocation(request.workload_id, d.pool_id, tier, request.gpus, d.reason, steps)
        return Allocation(
            request.workload_id,
            None,
            None,
            request.gpus,
            "queued_all_pools_exhausted",
            (*steps, FallbackStep(None, None, "queue")),
        )
