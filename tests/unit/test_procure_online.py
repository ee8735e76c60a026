"""The Procurer port adapter: break-even commitments in whole nodes, nothing without history."""

from __future__ import annotations

import numpy as np

from gpufleet.domain.catalog import default_pools
from gpufleet.ports import ProcurementContext
from gpufleet.procure.online import BreakevenProcurer

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
