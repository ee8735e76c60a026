"""``gpufleet bench portfolio``: planning speed at scale (2-year daily grid, 20 SKU-region pairs, 4+ tiers).

Synthetic, seeded demand (growth, weekly cycle, three scenarios at 0.8x/1.0x/1.25x) priced from the
built-in catalog: reserved 1y, reserved 3y (0.45x on-demand, the usual 3-year discount), 30-day secondary
contracts (neocloud, capacity-limited, 3-day lead), on-demand with quota, spot for the checkpointable
share. Reports solve time, size and the provider-share premium.
"""

from __future__ import annotations

import time

import numpy as np

from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.procure.portfolio import CommitTier, PairDemand, PortfolioProblem, optimize_portfolio

RESERVED_3Y_TO_ON_DEMAND = 0.45


def synthetic_problem(
    *,
    n_pairs: int = 20,
    n_days: int = 730,
    n_scenarios: int = 3,
    seed: int = 0,
    max_provider_share: float = 1.0,
    provider_cap_scope: str = "fleet",
) -> PortfolioProblem:
    rng = np.random.default_rng(seed)
    skus = list(PRICES_BY_SKU)
    scale = np.linspace(0.8, 1.25, n_scenarios)[:, None] if n_scenarios > 1 else np.ones((1, 1))
    pairs = []
    for i in range(n_pairs):
        price = PRICES_BY_SKU[skus[i % len(skus)]]
        od = float(price.on_demand)
        base = float(rng.uniform(50, 1000))
        growth = np.linspace(1.0, float(rng.uniform(0.7, 2.0)), n_days)
        weekly = 1.0 + 0.1 * np.sin(np.arange(n_days) * 2 * np.pi / 7 + rng.uniform(0, 6.3))
        level = scale * base * growth[None, :] * weekly[None, :]
        tiers = (
            CommitTier("reserved_1y", "aws", float(price.reserved_1y), 365, 14),
            CommitTier("reserved_3y", "aws", od * RESERVED_3Y_TO_ON_DEMAND, 1095, 30),
            CommitTier("secondary_30d", price.secondary_provider, float(price.secondary), 30, 3, max_gpus=base * 0.5),
        )
        pairs.append(
            PairDemand(
                skus[i % len(skus)],
                f"region-{i // len(skus)}",
                level * 0.5,
                level * 0.2,
                level * 0.3,
                tiers,
                od,
                on_demand_quota_gpus=base * 2.5,
                spot_usd_per_gpu_h=float(price.spot),
                spot_capacity_gpus=base * 0.2,
            )
        )
    return PortfolioProblem(tuple(pairs), max_provider_share=max_provider_share, provider_cap_scope=provider_cap_scope)


def run(*, n_pairs: int = 20, n_days: int = 730, n_scenarios: int = 3, share_cap: float = 0.6) -> dict[str, object]:
    """Solve uncapped, with a fleet-wide provider share cap, and with the cap in every pair; times and premiums."""
    out: dict[str, object] = {"n_pairs": n_pairs, "n_days": n_days, "n_scenarios": n_scenarios, "tiers": 5}
    for label, cap, scope in (
        ("uncapped", 1.0, "fleet"),
        ("share_cap", share_cap, "fleet"),
        ("pair_cap", share_cap, "pair"),
    ):
        t0 = time.perf_counter()
        problem = synthetic_problem(
            n_pairs=n_pairs, n_days=n_days, n_scenarios=n_scenarios, max_provider_share=cap, provider_cap_scope=scope
        )
        plan = optimize_portfolio(problem, stopwatch=time.perf_counter)
        out[label] = {
            "wall_s": round(time.perf_counter() - t0, 3),
            "solve_s": round(plan.solve_s, 3),
            "status": plan.status,
            "n_vars": plan.n_vars,
            "n_rows": plan.n_rows,
            "objective_usd": round(plan.objective_usd, 2),
            "provider_share": {k: round(v, 4) for k, v in plan.provider_share.items()},
            "decisions": len(plan.decisions),
            "solver": {k: round(v, 4) for k, v in plan.extra.items()},
        }
    u = out["uncapped"]["objective_usd"]  # type: ignore[index]
    c = out["share_cap"]["objective_usd"]  # type: ignore[index]
    out["share_cap_premium_pct"] = round(100.0 * (c - u) / u, 3)
    pc = out["pair_cap"]["objective_usd"]  # type: ignore[index]
    out["pair_cap_premium_pct"] = round(100.0 * (pc - u) / u, 3)
    return out
