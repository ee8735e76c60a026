"""From demand history to a portfolio plan, proposals and quota outlooks: the what-if report ``gpufleet plan``
prints over the commitment tiers. Nothing here makes a reservation: the orders the service places come from the
control loop's procurer (``POST /v1/plans:propose`` and the reconciler, docs/service.md).

The scenario model here is deliberately simple (the forecast package owns better ones): for each
SKU-region pair, flat scenarios at the ``quantiles`` of the last ``lookback_days`` of hourly demand,
scaled by the damped trend of the last week against the lookback mean.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG, BUILTIN_REGIONS
from gpufleet.domain.errors import ValidationError
from gpufleet.ports import PriceCatalog
from gpufleet.procure.portfolio import PortfolioPlan, PortfolioProblem, optimize_portfolio
from gpufleet.procure.proposals import PortfolioProposal, catalog_pair, coverage_report, proposals_from_plan
from gpufleet.procure.quota import QuotaOutlook, quota_outlook

FloatArray = npt.NDArray[np.float64]
WORKLOAD_CLASSES = ("serving", "training", "checkpointable")
MAX_HORIZON_DAYS = 730  # two years: the longest plan
# ``gpufleet plan`` has no database: it knows only the built-in regions, and a typo there (us-esat-1) got
# proposals and a quota outlook for pools that exist nowhere. plan_from_history itself does not restrict the
# region (a caller with its own region table checks there).
KNOWN_REGIONS: tuple[str, ...] = tuple(r.id for r in BUILTIN_REGIONS)


def pair_of(key: str, regions: Collection[str] | None = None, *, prices: PriceCatalog) -> tuple[str, str]:
    """A history series id ``"sku@region"`` (a bare id reads as h100_80gb@us-east-1) -> ``(sku, region)``.
    A SKU ``prices`` does not list, or a region not in ``regions`` (if given), is a ValidationError naming
    ``series_id``."""
    sku_id, region = key.split("@", 1) if "@" in key else ("h100_80gb", "us-east-1")
    if prices.list_price(sku_id) is None:
        known = ", ".join(prices.sku_ids())
        raise ValidationError("series_id", f"unknown SKU {sku_id!r} in {key!r} (known: {known})")
    if regions is not None and region not in regions:
        raise ValidationError("series_id", f"unknown region {region!r} in {key!r} (known: {', '.join(regions)})")
    return sku_id, region


def scenarios_from_history(
    hourly_gpus: FloatArray,
    horizon_days: int,
    *,
    quantiles: tuple[float, ...] = (0.25, 0.5, 0.9),
    lookback_days: int = 28,
) -> FloatArray:
    """``(len(quantiles), horizon_days)`` daily demand scenarios from hourly history."""
    h = np.asarray(hourly_gpus, dtype=np.float64)
    h = h[np.isfinite(h)]
    if len(h) == 0:
        raise ValidationError("history", "no finite demand values")
    recent = h[-lookback_days * 24 :]
    trend = math.sqrt(float(np.mean(recent[-168:])) / max(float(np.mean(recent)), 1e-9))
    levels = np.quantile(recent, quantiles) * trend
    return np.repeat(levels[:, None], horizon_days, axis=1)


@dataclass(frozen=True, slots=True)
class PlanReport:
    problem: PortfolioProblem
    plan: PortfolioPlan
    proposals: list[PortfolioProposal]
    quotas: list[QuotaOutlook]
    coverage: dict[str, dict[str, float]]


def plan_from_history(
    history: dict[str, FloatArray],
    *,
    start_s: int,
    horizon_days: int,
    workload_class: str = "serving",
    on_demand_quota_gpus: float | None = None,
    quota_increase_lead_s: int = 14 * 86400,
    prices: PriceCatalog = BUILTIN_PRICE_CATALOG,
) -> PlanReport:
    """``history`` maps ``"sku@region"`` (or a bare series id, read as h100_80gb@us-east-1) to hourly GPUs,
    priced from ``prices``."""
    if workload_class not in WORKLOAD_CLASSES:
        raise ValidationError("workload_class", f"must be one of {WORKLOAD_CLASSES}")
    if not 1 <= horizon_days <= MAX_HORIZON_DAYS:
        raise ValidationError("horizon", f"must be 1..{MAX_HORIZON_DAYS} days, got {horizon_days}")
    if on_demand_quota_gpus is not None and not on_demand_quota_gpus >= 0:  # NaN fails too
        raise ValidationError("on_demand_quota_gpus", f"must be >= 0 GPUs, got {on_demand_quota_gpus}")
    pairs = []
    for key, series in history.items():
        sku_id, region = pair_of(key, prices=prices)
        scen = scenarios_from_history(series, horizon_days)
        zero = np.zeros_like(scen)
        parts = {c: (scen if c == workload_class else zero) for c in WORKLOAD_CLASSES}
        quota = math.inf if on_demand_quota_gpus is None else on_demand_quota_gpus
        pairs.append(catalog_pair(sku_id, region, **parts, prices=prices, on_demand_quota_gpus=quota))
    problem = PortfolioProblem(tuple(pairs))
    plan = optimize_portfolio(problem)
    quotas = [
        quota_outlook(
            f"aws/{p.region_id}/{p.sku_id}/on_demand",
            np.quantile(p.serving + p.training + p.checkpointable, 0.9, axis=0),
            start_s=start_s,
            period_s=86400,
            quota_gpus=on_demand_quota_gpus,
            increase_lead_time_s=quota_increase_lead_s,
            now_s=start_s,
        )
        for p in pairs
    ]
    return PlanReport(
        problem, plan, proposals_from_plan(problem, plan, start_s=start_s), quotas, coverage_report(problem, plan)
    )
