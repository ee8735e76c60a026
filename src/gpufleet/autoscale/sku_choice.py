"""Choosing the cheapest SKU that meets a serving workload's latency SLO, as a decision with reasons."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class SkuOption:
    """One way to run a replica of the model (from a load test or the throughput model).

    rps_per_replica: requests per second one replica carries at the target utilization.
    latency_p95_s: p95 request latency on this SKU at that load (compared with the SLO).
    cold_start_s: time to a ready replica on this SKU (weights, compile, graph capture).
    """

    sku_id: str
    gpus_per_replica: int
    rps_per_replica: float
    price_usd_per_replica_h: float
    latency_p95_s: float
    cold_start_s: float


@dataclass(frozen=True, slots=True)
class SkuChoice:
    """The chosen option (None when nothing meets the SLO), its fleet and cost, and why others lost."""

    sku_id: str | None
    replicas: int
    cost_usd_per_h: float
    reason: str  # "cheapest_meeting_slo" | "no_sku_meets_slo"
    rejected: tuple[tuple[str, str], ...]


def choose_sku(
    options: tuple[SkuOption, ...],
    demand_rps: float,
    slo_latency_s: float,
    *,
    max_cold_start_s: float | None = None,
) -> SkuChoice:
    """Cheapest fleet (replicas x price) for ``demand_rps`` among options meeting the latency SLO.

    Ties go to the shorter cold start (it pre-warms with less lead and scales to zero more cheaply).
    """
    if demand_rps < 0 or slo_latency_s <= 0:
        raise ValidationError("demand_rps", "demand must be >= 0 and the SLO > 0")
    rejected: list[tuple[str, str]] = []
    best: tuple[float, float, SkuOption, int] | None = None
    for o in options:
        if o.latency_p95_s > slo_latency_s:
            rejected.append((o.sku_id, "latency_above_slo"))
            continue
        if max_cold_start_s is not None and o.cold_start_s > max_cold_start_s:
            rejected.append((o.sku_id, "cold_start_too_long"))
            continue
        n = max(1, math.ceil(demand_rps / o.rps_per_replica - 1e-9))
        cost = n * o.price_usd_per_replica_h
        key = (cost, o.cold_start_s, o, n)
        if best is None or key[:2] < best[:2]:
            if best is not None:
                rejected.append((best[2].sku_id, "more_expensive"))
            best = key
        else:
            rejected.append((o.sku_id, "more_expensive"))
    if best is None:
        return SkuChoice(None, 0, 0.0, "no_sku_meets_slo", tuple(rejected))
    cost, _, o, n = best
    return SkuChoice(o.sku_id, n, cost, "cheapest_meeting_slo", tuple(rejected))
