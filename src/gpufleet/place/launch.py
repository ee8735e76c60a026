"""After a launch fails: the fallback chain's next link, with the provider's reason.

Pure decision. A world that tried to launch in the chosen pool and was refused (e.g. EC2's
InsufficientInstanceCapacity, reported by the adapter as reason ``insufficient_capacity``) passes the refused
pools in ``failures`` (pool id -> reason code); they are treated as out of stock and the chain is walked again,
so the answer is the next link, and the refused pool's skipped step carries the launch's reason instead of the
generic ``stockout``. The end of the chain is still the queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpufleet.domain.allocations import Allocation, FallbackStep
from gpufleet.place.fallback import FallbackChain
from gpufleet.ports import PlacementRequest, Placer, PoolState


def next_link(
    request: PlacementRequest,
    pools: Sequence[PoolState],
    failures: Mapping[str, str],
    chain: Placer | None = None,
) -> Allocation:
    """The allocation the chain makes once the pools in ``failures`` refused the launch."""
    placer = chain or FallbackChain()
    states = [replace(st, in_stock=False) if st.pool.id in failures else st for st in pools]
    alloc = placer.choose(request, states)
    steps = tuple(
        FallbackStep(s.pool_id, s.tier, failures[s.pool_id]) if s.pool_id is not None and s.pool_id in failures else s
        for s in alloc.fallback
    )
    return replace(alloc, fallback=steps)
