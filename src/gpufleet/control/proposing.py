"""The procurement stage as the service asks for it: the loop's procurer on a context built from the store, and
when a pool's quota runs out.

The commitments the service proposes (the reconciler's pass and ``POST /v1/plans:propose`` alike) are the
loop's: :func:`procurement_context` builds the :class:`~gpufleet.ports.ProcurementContext` the simulator's desk
builds (hourly demand history, the reserved pool, the loop's forecast, the units held or on order at lead time),
the loop's procurer (``ControlLoop.gpufleet(...).procurer``, tier limits from :func:`tier_limits`) decides through
``ports.Procurer.propose``, and :func:`commitment_orders` turns its proposals into orders, each with a
deterministic idempotency key (:func:`order_key`: the same order proposed twice is one order).
:func:`pool_outlook` is the quota outlook of one pool against the spill-over of a demand forecast above
what is committed. :func:`plan_regions` says in which regions a SKU is planned, and which of its measured use each
plan reads (:func:`choose_plan_region`: its main region). Decisions are data; the caller creates the reservations
through its approval workflow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.control.procurement import TierLimits
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.ports import DemandForecast, ProcurementContext, ReservationProposal
from gpufleet.procure.quota import QuotaOutlook, quota_outlook

DAY_S = 86400


@dataclass(frozen=True, slots=True)
class HeldCommitment:
    """A reservation of the SKU-region held or on its way (pending approval .. active) that has not ended."""

    id: str
    units: int
    start_s: int
    end_s: int
    status: str


@dataclass(frozen=True, slots=True)
class CommitmentOrder:
    """A commitment the loop's procurer proposed, to enter the approval workflow, with its idempotency key."""

    proposal: ReservationProposal
    region_id: str
    idempotency_key: str


def order_key(sku_id: str, regions: Sequence[str], tier: str, start_s: int, units: int, term_months: int) -> str:
    """The deterministic idempotency key of an order (the same order proposed twice is one order)."""
    key_src = f"{sku_id}|{','.join(regions)}|{tier}|{start_s}|{units}|{term_months}"
    return "plan-" + hashlib.sha256(key_src.encode()).hexdigest()[:40]


def committed_at(held: Sequence[HeldCommitment], at_s: int) -> int:
    """Units held or on order (pending approval .. active) that have not ended by ``at_s``: what the
    simulator's desk counts as committed when a new order would land (``at_s`` = now + the pool's lead time)."""
    return sum(h.units for h in held if h.end_s > at_s)


def tier_limits(pools: Sequence[tuple[str, int | None]]) -> TierLimits:
    """What the pay-per-use tiers of one SKU can absorb, from its pools as ``(tier, quota_gpus)``: the quotas of
    its spot pools and of its secondary-provider pools given (the service passes those of the regions a plan reads,
    :func:`plan_regions`; the simulator's limits are per SKU). A pool whose quota is not known (None) counts for
    nothing, so the procurer never leans on capacity nobody has promised."""
    spot = sum(q for tier, q in pools if tier == Tier.SPOT.value and q)
    secondary = sum(q for tier, q in pools if tier == Tier.SECONDARY.value and q)
    return TierLimits(float(spot), float(secondary))


def procurement_context(
    *,
    now_s: int,
    sku_id: str,
    pool: CapacityPool,
    hourly_gpus: npt.NDArray[np.float64],
    forecast: DemandForecast | None,
    held: Sequence[HeldCommitment],
    gpus_per_node: int,
) -> ProcurementContext:
    """The loop's procurement context for one SKU-region, as the simulator's desk builds it: hourly demand
    (oldest first), the reserved pool, the loop's forecast, and what is held or on order at lead time."""
    if pool.tier is not Tier.RESERVED:
        raise ValidationError("pool", f"{pool.id!r} is {pool.tier.value}, not reserved")
    committed = committed_at(held, now_s + pool.lead_time_s)
    return ProcurementContext(
        now_s, sku_id, pool, np.asarray(hourly_gpus, dtype=np.float64), forecast, committed, gpus_per_node
    )


def commitment_orders(proposals: Sequence[ReservationProposal], *, region_id: str) -> tuple[CommitmentOrder, ...]:
    """The loop procurer's proposals as orders for the approval workflow, each with its idempotency key (on the
    reserved tier; a proposal of no units is no order)."""
    return tuple(
        CommitmentOrder(
            p, region_id, order_key(p.sku_id, (region_id,), Tier.RESERVED.value, p.start_s, p.units, p.term_months)
        )
        for p in proposals
        if p.units > 0
    )


def pool_outlook(
    pool_id: str,
    p90_gpus: npt.NDArray[np.float64],
    committed_gpus: npt.NDArray[np.float64],
    *,
    start_s: int,
    quota_gpus: float | None,
    increase_lead_s: int,
    now_s: int,
) -> QuotaOutlook:
    """When the pool's quota runs out: the daily p90 demand above what is committed (the whole spill-over of
    the SKU, the conservative case where it all lands in this pool) against ``quota_gpus``."""
    spill = np.maximum(np.asarray(p90_gpus, dtype=np.float64) - committed_gpus, 0.0)
    return quota_outlook(
        pool_id,
        spill,
        start_s=start_s,
        period_s=DAY_S,
        quota_gpus=quota_gpus,
        increase_lead_time_s=increase_lead_s,
        now_s=now_s,
    )


def choose_plan_region(
    used_gpu_s_by_region: Mapping[str, float],
    reserved_regions: Sequence[str],
    held_units_by_region: Mapping[str, int] | None = None,
) -> tuple[str | None, str]:
    """A SKU's main plan region (:func:`plan_regions`: the one that reads its use not attributed to another plan
    region), among the regions with a reserved pool: where most of its
    measured use ran (``most_used_region``), else where most of its reservations are held or on their way (so
    they are netted: ``held_region``), else the first (``first_reserved_region``); none without a reserved pool
    (``no_reserved_pool``). Ties go to the region named first in sorted order."""
    regions = sorted(set(reserved_regions))
    if not regions:
        return None, "no_reserved_pool"
    for weights, reason in ((used_gpu_s_by_region, "most_used_region"), (held_units_by_region or {}, "held_region")):
        ranked = [(float(v), r) for r, v in weights.items() if r in regions and v > 0]
        if ranked:
            return min(ranked, key=lambda x: (-x[0], x[1]))[1], reason
    return regions[0], "first_reserved_region"


@dataclass(frozen=True, slots=True)
class PlanRegion:
    """One region a SKU is planned in, and the use that plan reads. ``own_only``: the records naming a pool of this
    region; otherwise (the SKU's main region) every record of the SKU but those naming a pool of an ``excluded``
    region, so the use no other plan reads (records naming no pool, a pool of a region without a reserved pool, or
    an unknown pool) is planned here, and each record is read by exactly one plan."""

    region: str
    reason: str
    own_only: bool = False
    excluded: tuple[str, ...] = ()

    def reads(self, record_region: str | None) -> bool:
        """Whether this plan reads a record whose pool is in ``record_region`` (None: no pool, or an unknown one)."""
        if self.own_only:
            return record_region == self.region
        return record_region not in self.excluded


def plan_regions(
    measured: bool,
    used_gpu_s_by_region: Mapping[str, float],
    reserved_regions: Sequence[str],
    held_units_by_region: Mapping[str, int] | None = None,
    run_regions: Sequence[str] = (),
) -> tuple[PlanRegion, ...]:
    """Where a SKU's reservations are planned, and which use each plan reads (reservations are regional: capacity
    bought in one region does not serve use measured in another, and the same use read by two plans would be
    bought twice).

    * The main region (:func:`choose_plan_region`) reads all the use no other plan region reads. A SKU used in one
      region, or whose records name no pool, is planned there alone on all its use.
    * Each other region with a reserved pool where the SKU was used (records naming a pool there:
      ``used_region``) or where runs are registered (``planned_runs_region``) is planned on its own records only.
    * ``measured`` False (no use at all in the lookback): only the regions with a reserved pool where runs are
      registered, each from its own (absent) records, so only the runs can ask for a reservation.

    Empty when no plan is possible (no reserved pool; or not measured and no run in a reserved region)."""
    reserved = sorted(set(reserved_regions))
    with_runs = set(run_regions)
    if not measured:
        return tuple(PlanRegion(r, "planned_runs_region", own_only=True) for r in reserved if r in with_runs)
    main, why = choose_plan_region(used_gpu_s_by_region, reserved, held_units_by_region)
    if main is None:
        return ()
    used = {r: float(v) for r, v in used_gpu_s_by_region.items() if v > 0}
    others = [r for r in reserved if r != main and (r in used or r in with_runs)]
    return (
        PlanRegion(main, why, excluded=tuple(others)),
        *(PlanRegion(r, "used_region" if r in used else "planned_runs_region", own_only=True) for r in others),
    )
