"""The portfolio-LP Procurer (a closed-loop benchmark's procurer): whole nodes from the pool's price, term and lead;
forecasts taken as data; a Procurer replayed through the port on its own cadence."""

from __future__ import annotations

import numpy as np

from gpufleet.bench.procure import ProcurerPolicy
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG, default_pools
from gpufleet.forecast.quantiles import make_forecast
from gpufleet.ports import ProcurementContext
from gpufleet.procure.online import PortfolioProcurer
from gpufleet.procure.replay import ReplayConfig, replay

POOL = default_pools("h100_80gb")[0]


def _ctx(hist: np.ndarray, committed: int = 0, forecast: object = None) -> ProcurementContext:
    return ProcurementContext(1_000_000, "h100_80gb", POOL, hist, forecast, committed, 8)  # type: ignore[arg-type]


def test_steady_demand_is_reserved_in_whole_nodes_after_the_lead_time() -> None:
    props = PortfolioProcurer().propose(_ctx(np.full(14 * 24, 100.0)))
    assert len(props) == 1
    assert props[0].units == 104 and props[0].units % 8 == 0  # 100 GPUs rounded up to whole nodes (plan rule)
    assert props[0].start_s == 1_000_000 + POOL.lead_time_s
    assert props[0].term_months == POOL.term_months
    assert props[0].reason.startswith("portfolio_lp:")


def test_nothing_when_committed_covers_demand_or_history_is_short() -> None:
    assert PortfolioProcurer().propose(_ctx(np.full(14 * 24, 100.0), committed=100)) == []
    assert PortfolioProcurer().propose(_ctx(np.full(24, 100.0))) == []


def test_peaky_demand_reserves_only_the_base() -> None:
    t = np.arange(14 * 24)
    hist = np.where((t % 24) < 6, 400.0, 100.0)  # 6 peak hours a day: 25% < break-even 0.634
    props = PortfolioProcurer().propose(_ctx(hist))
    assert props and props[0].units <= 104


def test_the_forecast_is_taken_as_data() -> None:
    """History flat at 100 GPUs: the history scenarios (3) say 100. A forecast whose three quantile rows say 50 from
    now on adds three scenarios at 50, so GPUs 51-100 are used in half the scenarios, below the break-even (0.634):
    the LP reserves only about 50. Without the forecast it reserves the 100 (whole nodes: 104)."""
    hist = np.full(14 * 24, 100.0)
    base = PortfolioProcurer().propose(_ctx(hist))[0].units
    h = 7 * 24
    low = make_forecast(np.full(h, 50.0), np.full((3, h), 50.0), (0.1, 0.5, 0.9), "test")
    with_fc = PortfolioProcurer().propose(_ctx(hist, forecast=low))[0].units
    assert base == 104
    assert with_fc == 56


def test_a_procurer_asked_once_a_day_commits_after_its_minimum_history() -> None:
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=168, lead_h=24)
    demand = np.full(24 * 21, 40.0)
    res = replay(cfg, demand, ProcurerPolicy(PortfolioProcurer(), "lp", every_h=24))
    # decides once a day from day 7 on: 40 GPUs reserved a lead time after the first decision, none before
    assert res.commits[: 7 * 24].sum() == 0
    assert res.reserved_gpus[7 * 24 + 24 :].min() >= 40
    assert res.cost_usd < 40 * len(demand) * cfg.on_demand_usd_per_gpu_h


def test_closed_loop_comparison_runs_each_procurer_on_the_same_world() -> None:
    from gpufleet.bench.procure import closed_loop

    doc = closed_loop([1], days=9, gpus=64)
    row = doc["rows"][0]
    assert set(doc["ratio_to_baseline_loop"]) == {"gpufleet", "portfolio_lp", "breakeven"}
    for name in ("gpufleet", "portfolio_lp", "breakeven"):
        assert row[name]["total_cost_usd"] > 0
        assert row[name]["ratio_to_baseline_loop"] == round(
            row[name]["total_cost_usd"] / row["baseline"]["total_cost_usd"], 4
        )
