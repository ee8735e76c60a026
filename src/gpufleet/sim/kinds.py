"""Event kinds, pod states, tier groups and time units shared by the world and its parts (one definition each)."""

from __future__ import annotations

from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.sim.lifecycle import PodState as P

# event kinds: the index of the world's handler for each
ARRIVE, JOB_END, NODE_UP, NODE_FAIL, NODE_REPAIR, SPOT_PREEMPT, TICK, DAILY, RES_EVENT, STOCK, READY, RECHECK = range(
    12
)
OBSERVE = 12  # a serving fleet's queue-growth observation between two control ticks (sim/serving.py)
# pod states as plain ints for the event loop (the table and gate: sim/lifecycle.py)
QUEUED, RUNNING, DONE, REMOVED, PARKED = (int(s) for s in (P.QUEUED, P.RUNNING, P.DONE, P.REMOVED, P.PARKED))
PRIO_SERVING = 3  # queue priority of serving replicas (above every training priority)
HOUR_S = 3600
DAY_S = 86400

# tier ranks a pod may use (spot only for checkpointable training), in the order of reliability; a loop may
# declare another order for running nodes (PodTable.tier_orders)
TIERS_NO_SPOT = (TIER_RANK[Tier.RESERVED], TIER_RANK[Tier.ON_DEMAND], TIER_RANK[Tier.SECONDARY])
TIERS_ALL = (TIER_RANK[Tier.RESERVED], TIER_RANK[Tier.ON_DEMAND], TIER_RANK[Tier.SPOT], TIER_RANK[Tier.SECONDARY])
SPOT_RANK = TIER_RANK[Tier.SPOT]


def ranks(tiers: tuple[Tier, ...]) -> tuple[int, ...]:
    """The ranks of ``tiers``, in their order."""
    return tuple(TIER_RANK[t] for t in tiers)


LAUNCHED_TIERS = (Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY)  # tiers whose nodes are launched and terminated
LAUNCHED_RANKS = ranks(LAUNCHED_TIERS)
RESERVED_RANK = TIER_RANK[Tier.RESERVED]
