"""Serving's stock-out cover (control/stockout_cover.py): a pure decision, and the procurer's hook that asks it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.procurement import ForecastLedProcurer, TierLimits
from gpufleet.control.stockout_cover import REASON, StockoutCover
from gpufleet.domain.catalog import default_pools
from gpufleet.ports import ProcurementContext

POOL = default_pools("l40s", reserved_term_months=3, reserved_lead_time_s=7 * 24 * 3600)[0]
WEEK = 7 * 24


def test_tops_reserved_plus_secondary_up_to_the_quantile_in_whole_nodes() -> None:
    asks = np.full(WEEK, 20.0)
    asks[: WEEK // 2] = 40.0  # half the week at 40, half at 20: the 75 % quantile is 40
    d = StockoutCover().decide(asks, 8, TierLimits(secondary_capacity_gpus=16), 8)
    assert d.need_gpus == pytest.approx(40.0)
    assert d.held_gpus == 24.0
    assert d.gpus == 16  # 24 + 16 = 40
    assert d.reason.startswith(REASON + ":")


def test_no_cover_when_held_capacity_is_enough_or_history_short() -> None:
    cover = StockoutCover()
    asks = np.full(WEEK, 30.0)
    assert cover.decide(asks, 16, TierLimits(secondary_capacity_gpus=16), 8).gpus == 0
    assert cover.decide(asks[:10], 0, TierLimits(), 8).gpus == 0  # under a day of asks
    assert cover.decide(None, 0, TierLimits(), 8).gpus == 0  # serving not observed


def test_reads_only_the_window() -> None:
    asks = np.concatenate([np.full(4 * WEEK, 200.0), np.full(WEEK, 16.0)])  # a month ago serving was larger
    assert StockoutCover().decide(asks, 8, TierLimits(), 8).gpus == 8


@settings(max_examples=200, deadline=None)
@given(
    asks=st.lists(st.floats(0.0, 400.0), min_size=24, max_size=3 * WEEK),
    committed=st.integers(0, 400),
    secondary=st.floats(0.0, 200.0),
    spot=st.floats(0.0, 1000.0),
    per=st.sampled_from([1, 4, 8]),
    q=st.sampled_from([0.5, 0.75, 0.9]),
)
def test_never_beyond_the_quantile_and_never_counts_spot(
    asks: list[float], committed: int, secondary: float, spot: float, per: int, q: float
) -> None:
    """Covers the quantile of the window's asks with reserved + secondary, every node bought is needed (the last
    one covers at least one GPU below the quantile), and spot capacity changes nothing."""
    a = np.array(asks)
    cover = StockoutCover(quantile=q)
    d = cover.decide(a, committed, TierLimits(secondary_capacity_gpus=secondary), per)
    need = float(np.quantile(a[-cover.window_h :], q))
    held = committed + secondary
    assert d.gpus % per == 0 and d.gpus >= 0
    assert held + d.gpus >= need - 1e-6
    if d.gpus > 0:
        assert held + d.gpus - per < need
    with_spot = cover.decide(a, committed, TierLimits(spot_capacity_gpus=spot, secondary_capacity_gpus=secondary), per)
    assert with_spot == d


def _ctx(hist: np.ndarray, asks: np.ndarray | None, committed: int) -> ProcurementContext:
    return ProcurementContext(len(hist) * 3600, "l40s", POOL, hist, None, committed, 8, serving_asks_gpus=asks)


def test_procurer_adds_the_cover_as_its_own_proposal_over_what_the_forecast_rule_buys() -> None:
    hist = np.full(3 * WEEK, 4.0)  # little demand in the history: the forecast-led rule buys nothing more
    asks = np.full(3 * WEEK, 40.0)
    p = ForecastLedProcurer({"l40s": TierLimits(secondary_capacity_gpus=16)})
    props = p.propose(_ctx(hist, asks, 8))
    cover = [x for x in props if x.reason.startswith(REASON)]
    assert len(cover) == 1 and cover[0].units == 16  # 8 reserved + 16 secondary + 16 = 40
    assert sum(x.units for x in props if x.reason.startswith("forecast_led")) == 0
    # without the serving asks (a replay, the service) or with the cover off: the forecast-led rule alone
    assert p.propose(_ctx(hist, None, 8)) == []
    off = ForecastLedProcurer({"l40s": TierLimits(secondary_capacity_gpus=16)}, stockout_cover=None)
    assert off.propose(_ctx(hist, asks, 8)) == []


def test_procurer_counts_its_own_forecast_led_buy_before_the_cover() -> None:
    hist = np.full(3 * WEEK, 64.0)  # steady demand: the forecast-led rule reserves it
    asks = np.full(3 * WEEK, 40.0)
    p = ForecastLedProcurer({"l40s": TierLimits(secondary_capacity_gpus=16)})
    props = p.propose(_ctx(hist, asks, 0))
    assert sum(x.units for x in props if x.reason.startswith("forecast_led")) >= 40
    assert not any(x.reason.startswith(REASON) for x in props)
