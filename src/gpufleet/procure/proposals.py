"""Reservation proposals from a portfolio plan, timed by lead time, plus renew / let-expire decisions.

A proposal groups a tier's commitments in one pair that start within ``batch_periods`` of each other
(one order instead of daily slivers; the group starts at its first period with the summed GPUs, rounded
up to whole nodes); it would have to be ordered by ``submit_by_s = start_s - lead time``.
An existing commitment that expires is renewed for the GPUs the plan buys again in that pair and tier
around its expiry; the rest is let expire (the plan found them not worth their price).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.catalog import ListPrice
from gpufleet.domain.errors import ValidationError
from gpufleet.ports import PriceCatalog
from gpufleet.procure.portfolio import CommitDecision, CommitTier, PairDemand, PortfolioPlan, PortfolioProblem

FloatArray = npt.NDArray[np.float64]
RESERVED_3Y_TO_ON_DEMAND = 0.45  # typical 3-year no-upfront discount (assumption; the catalog lists 1-yr only)


@dataclass(frozen=True, slots=True)
class PortfolioProposal:
    """One line of a portfolio plan's order book: reserve, renew or let expire a commitment of one tier.

    Not the control loop's :class:`gpufleet.ports.ReservationProposal` (one reserved pool, one term in months,
    what enters the approval workflow): a plan line may be a let-expire notice and names a catalog tier. Plan
    lines are a what-if (``gpufleet plan``) and the portfolio procurer's working (``procure/online.py``); no
    reservation is made from one.
    """

    action: str  # "reserve" | "renew" | "let_expire"
    sku_id: str
    regions: tuple[str, ...]
    tier: str
    units: int
    start_s: int
    term_days: int | None
    submit_by_s: int
    est_cost_usd: float
    rationale: str
    reason: str


@dataclass(frozen=True, slots=True)
class ExistingCommitment:
    pair: str  # "sku@region"
    tier: str
    units: int
    end_period: int


def listed(prices: PriceCatalog, sku_id: str) -> ListPrice:
    """The catalog's list price of ``sku_id``; a ValidationError naming ``sku_id`` if it is not listed."""
    p = prices.list_price(sku_id)
    if p is None:
        raise ValidationError(
            "sku_id", f"{sku_id!r} is not in the price catalog (known: {', '.join(prices.sku_ids())})"
        )
    return p


def catalog_tiers(sku_id: str, prices: PriceCatalog, *, period_h: float = 24.0) -> tuple[CommitTier, ...]:
    """Reserved 1y (catalog price, 14-day lead) and 3y (0.45x on-demand, 30-day lead) on a grid of period_h."""
    p = listed(prices, sku_id)
    per_day = 24.0 / period_h
    return (
        CommitTier("reserved_1y", "aws", float(p.reserved_1y), round(365 * per_day), round(14 * per_day)),
        CommitTier(
            "reserved_3y",
            "aws",
            float(p.on_demand) * RESERVED_3Y_TO_ON_DEMAND,
            round(1095 * per_day),
            round(30 * per_day),
        ),
    )


def catalog_pair(
    sku_id: str,
    region_id: str,
    serving: FloatArray,
    training: FloatArray,
    checkpointable: FloatArray,
    *,
    prices: PriceCatalog,
    **kw: object,
) -> PairDemand:
    """One SKU-region's demand, priced from the injected catalog."""
    p = listed(prices, sku_id)
    return PairDemand(
        sku_id,
        region_id,
        serving,
        training,
        checkpointable,
        catalog_tiers(sku_id, prices),
        float(p.on_demand),
        spot_usd_per_gpu_h=float(p.spot),
        **kw,  # type: ignore[arg-type]
    )


def proposals_from_plan(
    problem: PortfolioProblem,
    plan: PortfolioPlan,
    *,
    start_s: int,
    batch_periods: int = 7,
    gpus_per_node: int = 8,
    existing: tuple[ExistingCommitment, ...] = (),
) -> list[PortfolioProposal]:
    """Turn a plan's commitments into orders (reserve/renew) and let-expire notices, sorted by submit date."""
    period_s = int(problem.period_h * 3600)
    out: list[PortfolioProposal] = []
    by_key: dict[tuple[str, str], list[CommitDecision]] = {}
    for d in plan.decisions:
        by_key.setdefault((d.pair, d.tier), []).append(d)
    tiers = {(p.key, t.name): t for p in problem.pairs for t in p.commit_tiers}
    renewed: dict[tuple[str, str, int], float] = {}
    for (pair, tier_name), ds in by_key.items():
        tier = tiers[(pair, tier_name)]
        ds.sort(key=lambda d: d.start_period)
        groups: list[list[CommitDecision]] = []
        for d in ds:
            if groups and d.start_period - groups[-1][0].start_period < batch_periods:
                groups[-1].append(d)
            else:
                groups.append([d])
        for g in groups:
            first = g[0]
            gpus = sum(x.gpus for x in g)
            units = math.ceil(gpus / gpus_per_node - 1e-6) * gpus_per_node
            if units <= 0:
                continue
            start_p = first.start_period
            util = float(np.average([x.expected_utilization for x in g], weights=[x.gpus for x in g]))
            q = float(np.average([x.demand_quantile_covered for x in g], weights=[x.gpus for x in g]))
            be = first.breakeven_utilization
            action = "reserve"
            for e in existing:
                if e.pair == pair and e.tier == tier_name and abs(e.end_period - start_p) <= batch_periods:
                    action = "renew"
                    renewed[(e.pair, e.tier, e.end_period)] = renewed.get((e.pair, e.tier, e.end_period), 0) + units
            sku_id, region = pair.split("@", 1)
            term_days = None if tier.term_periods is None else round(tier.term_periods * problem.period_h / 24)
            start = start_s + start_p * period_s
            out.append(
                PortfolioProposal(
                    action=action,
                    sku_id=sku_id,
                    regions=(region,),
                    tier=tier_name,
                    units=units,
                    start_s=start,
                    term_days=term_days,
                    submit_by_s=start - tier.lead_periods * period_s,
                    est_cost_usd=round(sum(x.est_cost_usd for x in g) * units / max(gpus, 1e-9), 2),
                    rationale=(
                        f"{units} GPUs of {sku_id} in {region} on {tier_name}: expected utilization {util:.0%} vs "
                        f"break-even {be:.0%}; covers demand up to its {q:.0%} quantile"
                    ),
                    reason="expected_use_above_breakeven" if util >= be - 1e-6 else "service_level_or_cap",
                )
            )
    for e in existing:
        kept = renewed.get((e.pair, e.tier, e.end_period), 0)
        if kept < e.units:
            sku_id, region = e.pair.split("@", 1)
            end = start_s + e.end_period * period_s
            out.append(
                PortfolioProposal(
                    action="let_expire",
                    sku_id=sku_id,
                    regions=(region,),
                    tier=e.tier,
                    units=e.units - int(kept),
                    start_s=end,
                    term_days=None,
                    submit_by_s=end,
                    est_cost_usd=0.0,
                    rationale=f"the plan does not buy these {e.units - int(kept)} GPUs again at expiry",
                    reason="below_breakeven_after_expiry",
                )
            )
    out.sort(key=lambda p: (p.submit_by_s, p.sku_id, p.tier))
    return out


def coverage_report(problem: PortfolioProblem, plan: PortfolioPlan) -> dict[str, dict[str, float]]:
    """Per pair: share of expected demand GPU-h covered by commitments, and committed utilization."""
    out: dict[str, dict[str, float]] = {}
    for p in problem.pairs:
        d = p.serving + p.training + p.checkpointable
        cap = sum(plan.capacity[p.key].values(), np.zeros(d.shape[1]))
        if p.existing_gpus is not None:
            cap = cap + p.existing_gpus
        used = np.minimum(d, cap[None, :]).mean(axis=0).sum()
        out[p.key] = {
            "coverage": float(used / max(d.mean(axis=0).sum(), 1e-9)),
            "utilization": float(used / max(cap.sum(), 1e-9)),
        }
    return out


def due_proposals(
    proposals: list[PortfolioProposal], *, now_s: int, within_s: int = 7 * 86400
) -> list[PortfolioProposal]:
    """Orders that must enter the approval workflow now: submit-by date within ``within_s`` (or passed)."""
    return [p for p in proposals if p.action in ("reserve", "renew") and p.submit_by_s <= now_s + within_s]
