"""A node tier launched on EC2 (where Karpenter is not used): walk the placement chain, launch in the chosen
pool, and on a capacity refusal ask the chain for its next link.

Contract: the decision is :func:`gpufleet.place.launch.next_link`; this loop only acts and reports. Each pool gets
its own ClientToken (derived from the workload and the pool), so a retried launch in the same pool is one launch
at EC2. A launch with an unknown outcome (no answer) stops the walk: trying the next pool could launch twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.adapters.aws.skus import instances_for
from gpufleet.control.cloud import next_link
from gpufleet.domain.allocations import Allocation
from gpufleet.domain.pools import Tier
from gpufleet.ports import PlacementRequest, PoolState

if TYPE_CHECKING:
    from gpufleet.adapters.aws.instances import AwsNodeTier, LaunchOutcome


@dataclass(frozen=True, slots=True)
class TierLaunch:
    allocation: Allocation  # the chain's final answer (pool None = queued)
    outcome: LaunchOutcome | None  # the last launch tried (None: no pool was tried)
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (pool id, launch status) in order


def client_token(workload_id: str, pool_id: str) -> str:
    return "gft-" + hashlib.sha256(f"{workload_id}|{pool_id}".encode()).hexdigest()[:40]


def launch_with_fallback(tier: AwsNodeTier, request: PlacementRequest, pools: Sequence[PoolState]) -> TierLaunch:
    failures: dict[str, str] = {}
    attempts: list[tuple[str, str]] = []
    outcome: LaunchOutcome | None = None
    by_id = {st.pool.id: st.pool for st in pools}
    while True:
        alloc = next_link(request, pools, failures)
        if alloc.pool_id is None:
            return TierLaunch(alloc, outcome, attempts)
        pool = by_id[alloc.pool_id]
        outcome = tier.launch(
            pool.region_id,
            sku_id=request.sku_id,
            count=instances_for(request.sku_id, request.gpus),
            client_token=client_token(request.workload_id, pool.id),
            spot=pool.tier is Tier.SPOT,
        )
        attempts.append((pool.id, outcome.status))
        if outcome.status in ("launched", "unknown"):
            return TierLaunch(alloc, outcome, attempts)
        failures[pool.id] = outcome.reason
