"""The break-even Procurer (the closed-loop benchmark's named baseline): whole nodes, nothing without history."""

from __future__ import annotations

import numpy as np

from gpufleet.bench.procure import BreakevenProcurer
from gpufleet.domain.catalog import default_pools
from gpufleet.ports import ProcurementContext

POOL = default_pools("h100_80gb")[0]


def _ctx(hist: np.ndarray, committed: int = 0) -> ProcurementContext:
    return ProcurementContext(1_000_000, "h100_80gb", POOL, hist, None, committed, 8)


def test_steady_demand_is_reserved_in_whole_nodes() -> None:
    props = BreakevenProcurer().propose(_ctx(np.full(14 * 24, 100.0)))
    assert len(props) == 1
    assert props[0].units == 96 and props[0].units % 8 == 0
    assert props[0].start_s == 1_000_000 + POOL.lead_time_s
    assert props[0].term_months == POOL.term_months


def test_nothing_when_committed_covers_demand_or_history_is_short() -> None:
    assert BreakevenProcurer().propose(_ctx(np.full(14 * 24, 100.0), committed=100)) == []
    assert BreakevenProcurer().propose(_ctx(np.full(24, 100.0))) == []


def test_peaky_demand_reserves_only_the_part_used_above_break_even() -> None:
    t = np.arange(14 * 24)
    hist = np.where((t % 24) < 6, 400.0, 100.0)  # 6 peak hours a day: 25% < alpha 0.634
    props = BreakevenProcurer().propose(_ctx(hist))
    assert props and props[0].units <= 100


def test_the_injected_price_catalog_sets_the_break_even() -> None:
    """Demand at 400 GPUs 14 h a day, 100 otherwise: used 58% of the time above 100. With the built-in prices
    (reserved / on-demand 0.634) the peak is not worth reserving; a catalog whose on-demand price is twice the
    reserved one (break-even 50%) reserves it. An unlisted SKU falls back to the catalog's ratio."""
    from decimal import Decimal

    from gpufleet.domain.catalog import LIST_PRICES, ListPrice, ListPriceCatalog

    t = np.arange(14 * 24)
    hist = np.where((t % 24) < 14, 400.0, 100.0)
    builtin = BreakevenProcurer().propose(_ctx(hist))
    assert builtin and builtin[0].units <= 104
    cheap_reserved = tuple(
        ListPrice(p.sku_id, Decimal(POOL.price_usd_per_gpu_h) * 2, p.reserved_1y, p.spot, p.secondary, "nebius")
        if p.sku_id == "h100_80gb"
        else p
        for p in LIST_PRICES
    )
    injected = BreakevenProcurer(prices=ListPriceCatalog(cheap_reserved)).propose(_ctx(hist))
    assert injected and injected[0].units >= 392
    unlisted = BreakevenProcurer(prices=ListPriceCatalog((), reserved_to_on_demand=0.5)).propose(_ctx(hist))
    assert [p.units for p in unlisted] == [p.units for p in injected]
