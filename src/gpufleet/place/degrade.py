"""Placement with graceful degradation: pool, region, fallback chain, degrade / preempt / queue.

``recommend(request) -> PlacementDecision`` never raises for an exhausted pool. It walks the candidate
pools (acceptable SKUs; tiers in chain order reserved -> on_demand -> spot -> secondary, then price; with
``spot_first``, checkpointed training tries the spot pools cheaper than on-demand before on-demand) and skips
each with an explicit trigger:

  ``gpu_memory``                 the pool's SKU cannot hold a replica: its memory x GPUs per replica is below
                                 the replica's declared need (``replica_memory_gb``; a SKU of unknown memory too)
  ``serving_never_spot`` / ``not_checkpointable``  spot carries checkpointable training only
  ``stockout``                   the provider signals no capacity
  ``quota_headroom``             fewer free GPUs under quota than needed (and no deadline at stake)
  ``queue_wait_exceeds_deadline`` no room now, and this pool's queue would start the job too late
  ``pool_utilization``           the pool is above ``utilization_high``
  ``provider_share_cap``         placing here would put one provider above ``max_provider_share``

If no pool takes the workload at full size it tries, in order: each degrade option the workload declared
(smaller GPU count or SKU, lower replica floor) -> ``degraded``; preempting strictly lower-priority work
(never serving for training; the lowest priority first, and no victim the others make useless) ->
``preempt_lower_priority``; and finally a queue decision with the expected
start time (``queued_deadline_ok`` or ``queued_deadline_at_risk``: the shortest wait makes it late;
``queued_deadline_missed``: the deadline has passed, or the run would not finish by it even if it started now;
``queued_no_capacity_signal`` when no pool gives a wait estimate). The decision also carries the ordered chain of the pools after the chosen one
with the trigger that would move the workload there, and every pool tried and passed over (``skipped``: for the
request as asked, then for each degrade option tried, the step naming the option's index).

A placement, degrade or preemption whose run cannot finish by the workload's deadline even though it starts now
(the deadline has passed, or ``expected_run_s`` no longer fits before it) keeps its action (starting now is the
soonest it can) and says so: its reason ends in ``_deadline_missed`` (``placed_on_demand_deadline_missed``,
``degraded_deadline_missed``, ``preempt_lower_priority_deadline_missed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.domain.allocations import FallbackStep
from gpufleet.domain.pools import TIER_RANK, CapacityPool, Tier
from gpufleet.domain.workloads import DegradeOption, Priority, Workload, WorkloadKind


@dataclass(frozen=True, slots=True)
class PoolHeadroom:
    """The degrade recommender's view of one pool now: free GPUs, utilization, stockout, queue wait.

    Derived at the edge from the loop's observation :class:`gpufleet.ports.PoolState` (``place/chain.py``) or
    from stored rows (the service); the recommender never reads a world itself.
    """

    pool: CapacityPool
    free_gpus: float  # GPUs obtainable now under quota / reserved capacity left
    utilization: float = 0.0  # 0..1 share of the pool's capacity in use
    stockout: bool = False
    queue_wait_s: int | None = None  # expected wait for capacity here, None = unknown


@dataclass(frozen=True, slots=True)
class RunningWork:
    workload_id: str
    pool_id: str
    gpus: int
    priority: Priority
    kind: WorkloadKind


@dataclass(frozen=True, slots=True)
class DegradeRequest:
    """One workload to place with graceful degradation (the loop's port request is
    :class:`gpufleet.ports.PlacementRequest`; ``place/chain.py`` converts it into this)."""

    workload: Workload
    now_s: int
    pools: tuple[PoolHeadroom, ...]
    expected_run_s: int = 0  # run time, to check the deadline
    replicas: int | None = None  # None: gang size (training) or replica floor (serving)
    running: tuple[RunningWork, ...] = ()
    provider_gpus_in_use: dict[str, float] = field(default_factory=dict)
    max_provider_share: float = 1.0
    utilization_high: float = 0.95
    # checkpointed training tries a spot pool cheaper than every on-demand pool of its SKU right after reserved (as
    # the loop's ``control/placement.py: SpotFirstForCheckpointed`` launches); off: the order of reliability
    spot_first: bool = False
    # GPU memory one replica (gang member) needs across its GPUs, GB (None: not declared, not checked), and each
    # SKU's memory per GPU: a pool whose SKU cannot hold a replica is skipped, a degrade option onto one too
    replica_memory_gb: int | None = None
    sku_memory_gb: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlacementDecision:
    workload_id: str
    action: str  # "place" | "degrade" | "preempt" | "queue"
    reason: str
    pool_id: str | None
    region_id: str | None
    tier: str | None
    sku_id: str | None
    gpus: int
    chain: tuple[FallbackStep, ...]  # links after the chosen pool, in order, each with its trigger
    skipped: tuple[FallbackStep, ...]  # pools tried before the choice, each with the trigger that skipped it
    degrade: DegradeOption | None = None
    victims: tuple[str, ...] = ()
    expected_start_s: int | None = None


def _need(req: DegradeRequest, opt: DegradeOption | None) -> tuple[int, tuple[str, ...], int]:
    w = req.workload
    per = w.gpus_per_replica if opt is None or opt.gpus_per_replica is None else opt.gpus_per_replica
    if req.replicas is not None:
        n = req.replicas
    elif w.kind is WorkloadKind.SERVING and w.scaling is not None:
        n = w.scaling.min_replicas
    else:
        n = w.gang_size
    if opt is not None and opt.min_replicas is not None:
        n = min(n, opt.min_replicas)
    skus = w.acceptable_skus if opt is None or opt.sku_id is None else (opt.sku_id,)
    return per * max(n, 1), skus, per


def _holds(req: DegradeRequest, sku_id: str, per: int) -> bool:
    """Whether ``per`` GPUs of the SKU hold one replica's declared memory (True when none is declared)."""
    need = req.replica_memory_gb
    if need is None:
        return True
    mem = req.sku_memory_gb.get(sku_id)
    return mem is not None and mem * per >= need


def _candidates(req: DegradeRequest, skus: tuple[str, ...]) -> list[PoolHeadroom]:
    c = [p for p in req.pools if p.pool.sku_id in skus]
    if req.spot_first and req.workload.checkpointable:  # spot cheaper than on-demand goes just before on-demand
        od = [p.pool.price_usd_per_gpu_h for p in c if p.pool.tier is Tier.ON_DEMAND]
        least = min(od) if od else None

        def rank(p: PoolHeadroom) -> float:
            cheap = p.pool.tier is Tier.SPOT and (least is None or p.pool.price_usd_per_gpu_h < least)
            return TIER_RANK[Tier.ON_DEMAND] - 0.5 if cheap else TIER_RANK[p.pool.tier]

        return sorted(c, key=lambda p: (rank(p), p.pool.price_usd_per_gpu_h, p.pool.id))
    return sorted(c, key=lambda p: (TIER_RANK[p.pool.tier], p.pool.price_usd_per_gpu_h, p.pool.id))


def _trigger(req: DegradeRequest, ps: PoolHeadroom, gpus: int, per: int) -> str | None:
    """Why this pool cannot take ``gpus`` (``per`` per replica) now (None = it can)."""
    w, pool = req.workload, ps.pool
    if not _holds(req, pool.sku_id, per):
        return "gpu_memory"
    if not pool.allows(checkpointable=w.checkpointable, serving=w.kind is WorkloadKind.SERVING):
        return "serving_never_spot" if w.kind is WorkloadKind.SERVING else "not_checkpointable"
    if ps.stockout:
        return "stockout"
    if ps.free_gpus < gpus:
        # no room now; say whether waiting in this pool's queue would also break the deadline
        late = (
            w.deadline_s is not None
            and ps.queue_wait_s is not None
            and req.now_s + ps.queue_wait_s + req.expected_run_s > w.deadline_s
        )
        return "queue_wait_exceeds_deadline" if late else "quota_headroom"
    if ps.utilization >= req.utilization_high:
        return "pool_utilization"
    if req.max_provider_share < 1.0:
        total = sum(req.provider_gpus_in_use.values()) + gpus
        mine = req.provider_gpus_in_use.get(pool.provider_id, 0.0) + gpus
        if mine > req.max_provider_share * total + 1e-9:
            return "provider_share_cap"
    return None


def _search(
    req: DegradeRequest, gpus: int, skus: tuple[str, ...], per: int, option: int | None = None
) -> tuple[PoolHeadroom | None, list[FallbackStep], list[PoolHeadroom]]:
    skipped: list[FallbackStep] = []
    cands = _candidates(req, skus)
    for i, ps in enumerate(cands):
        trig = _trigger(req, ps, gpus, per)
        if trig is None:
            return ps, skipped, cands[i + 1 :]
        skipped.append(FallbackStep(ps.pool.id, ps.pool.tier, trig, option))
    return None, skipped, []


def _chain(req: DegradeRequest, rest: list[PoolHeadroom], per: int) -> tuple[FallbackStep, ...]:
    steps = []
    for ps in rest:
        if ps.pool.allows(
            checkpointable=req.workload.checkpointable, serving=req.workload.kind is WorkloadKind.SERVING
        ) and _holds(req, ps.pool.sku_id, per):
            steps.append(FallbackStep(ps.pool.id, ps.pool.tier, "on_stockout_quota_or_utilization"))
    steps.append(FallbackStep(None, None, "queue_when_all_pools_exhausted"))
    return tuple(steps)


def _decision(
    req: DegradeRequest,
    action: str,
    reason: str,
    ps: PoolHeadroom,
    gpus: int,
    per: int,
    skipped: list[FallbackStep],
    rest: list[PoolHeadroom],
    **kw: object,
) -> PlacementDecision:
    return PlacementDecision(
        workload_id=req.workload.id,
        action=action,
        reason=reason,
        pool_id=ps.pool.id,
        region_id=ps.pool.region_id,
        tier=ps.pool.tier.value,
        sku_id=ps.pool.sku_id,
        gpus=gpus,
        chain=_chain(req, rest, per),
        skipped=tuple(skipped),
        expected_start_s=req.now_s,
        **kw,  # type: ignore[arg-type]
    )


def _preempt(
    req: DegradeRequest, gpus: int, skus: tuple[str, ...], per: int
) -> tuple[PoolHeadroom, tuple[str, ...]] | None:
    w = req.workload
    serving = w.kind is WorkloadKind.SERVING
    for ps in _candidates(req, skus):
        if (
            ps.stockout
            or not ps.pool.allows(checkpointable=w.checkpointable, serving=serving)
            or not _holds(req, ps.pool.sku_id, per)
        ):
            continue  # freeing GPUs there does not help (a full pool is what preemption is for: no utilization cap)
        victims = sorted(
            (
                r
                for r in req.running
                if r.pool_id == ps.pool.id
                and r.priority < w.priority
                and not (r.kind is WorkloadKind.SERVING and w.kind is WorkloadKind.TRAINING)
            ),
            key=lambda r: (r.priority, -r.gpus),
        )
        freed, chosen = ps.free_gpus, []
        for v in victims:
            if freed >= gpus:
                break
            freed += v.gpus
            chosen.append(v)
        if freed < gpus or not chosen:
            continue
        for v in reversed(chosen[:-1]):  # spare a victim a later one made useless (highest priority first)
            if freed - v.gpus >= gpus:
                freed -= v.gpus
                chosen.remove(v)
        return ps, tuple(v.workload_id for v in chosen)
    return None


def _misses_deadline(req: DegradeRequest) -> bool:
    """Whether the run cannot finish by the deadline even if it starts now (the deadline passed, or is too close)."""
    deadline = req.workload.deadline_s
    return deadline is not None and req.now_s + req.expected_run_s > deadline


def recommend(req: DegradeRequest) -> PlacementDecision:
    """Place, degrade, preempt or queue; every outcome is a decision with a reason code, never an error."""
    gpus, skus, per = _need(req, None)
    ps, skipped, rest = _search(req, gpus, skus, per)
    late = "_deadline_missed" if _misses_deadline(req) else ""
    if ps is not None:
        return _decision(req, "place", f"placed_{ps.pool.tier.value}{late}", ps, gpus, per, skipped, rest)
    for i, opt in enumerate(req.workload.degrade_options):
        g2, s2, per2 = _need(req, opt)
        ps2, skipped2, rest2 = _search(req, g2, s2, per2, i)
        skipped += skipped2  # an option tried and refused is part of the answer too
        if ps2 is not None:
            return _decision(req, "degrade", f"degraded{late}", ps2, g2, per2, skipped, rest2, degrade=opt)
    pre = _preempt(req, gpus, skus, per)
    if pre is not None:
        return _decision(
            req, "preempt", f"preempt_lower_priority{late}", pre[0], gpus, per, skipped, [], victims=pre[1]
        )
    waits = [
        p.queue_wait_s
        for p in _candidates(req, skus)
        if p.queue_wait_s is not None
        and p.pool.allows(checkpointable=req.workload.checkpointable, serving=req.workload.kind is WorkloadKind.SERVING)
        and _holds(req, p.pool.sku_id, per)
    ]
    start = req.now_s + min(waits) if waits else None
    deadline = req.workload.deadline_s
    if _misses_deadline(req):
        reason = "queued_deadline_missed"  # passed, or too close to finish even if it started now: no wait helps
    elif start is None:
        reason = "queued_no_capacity_signal"
    elif deadline is None or start + req.expected_run_s <= deadline:
        reason = "queued_deadline_ok"
    else:
        reason = "queued_deadline_at_risk"
    return PlacementDecision(
        workload_id=req.workload.id,
        action="queue",
        reason=reason,
        pool_id=None,
        region_id=None,
        tier=None,
        sku_id=None,
        gpus=gpus,
        chain=(FallbackStep(None, None, "queue_when_all_pools_exhausted"),),
        skipped=tuple(skipped),
        expected_start_s=start,
    )
