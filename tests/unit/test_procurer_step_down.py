"""The procurer's hold on a step down (control/procurement.py, ``step_down_h``): no new commitment while the last
two hours' demand is below the break-even share (reserved / on-demand) of the lowest demand at the same hour on the
five days before each."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.control.procurement import ForecastLedProcurer, _stepped_down
from gpufleet.domain.catalog import default_pools
from gpufleet.ports import ProcurementContext

POOL = default_pools("h100_80gb", reserved_term_months=1, reserved_lead_time_s=24 * 3600)[0]
WEEK = 7 * 24
ALPHA = 0.634


def _series(days: int, drop_at_h: int | None, to: float = 10.0, seed: int = 5, noise: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    h = np.arange(days * 24)
    level = np.where(h < drop_at_h, 100.0, to) if drop_at_h is not None else np.full(len(h), 100.0)
    return np.maximum(0.0, level * (1 + 0.2 * np.sin(2 * np.pi * (h % 24) / 24)) + rng.normal(0, noise, len(h)))


def test_a_step_down_is_two_hours_below_the_break_even_share_of_the_five_days_before() -> None:
    hist = _series(14, drop_at_h=13 * 24)
    assert not _stepped_down(hist[: 13 * 24], 2, ALPHA)  # the hour before the drop
    assert _stepped_down(hist[: 13 * 24 + 1], 1, ALPHA)  # its first hour, one asked
    assert not _stepped_down(hist[: 13 * 24 + 1], 2, ALPHA)  # two hours asked, one seen (it may be partly measured)
    assert _stepped_down(hist[: 13 * 24 + 2], 2, ALPHA)
    assert not _stepped_down(hist[: 4 * 24 + 2], 2, ALPHA)  # fewer than five days before: never
    # a fall to 70 % of the level is below the old days but above the break-even share of them: not a step down
    shallow = _series(14, drop_at_h=13 * 24, to=70.0, noise=0.0)
    assert not _stepped_down(shallow[: 13 * 24 + 3], 2, ALPHA)
    # hours with no demand on one of the days before never count as a step down (nothing to fall from)
    gaps = hist[: 13 * 24 + 2].copy()
    gaps[13 * 24 - 24 * 3] = 0.0
    assert not _stepped_down(gaps, 2, ALPHA)


@settings(max_examples=200, deadline=None)
@given(
    level=st.floats(1.0, 1e4),
    days=st.integers(5, 12),
    noise=st.floats(0.0, 0.15),
    seed=st.integers(0, 2**16),
)
def test_noise_below_the_break_even_gap_never_holds(level: float, days: int, noise: float, seed: int) -> None:
    """Demand within +-15 % of a steady diurnal level never looks like a step down (0.85 > 0.634 x 1.15)."""
    rng = np.random.default_rng(seed)
    h = np.arange(days * 24 + 2)
    hist = level * (1 + 0.2 * np.sin(2 * np.pi * (h % 24) / 24)) * (1 + rng.uniform(-noise, noise, len(h)))
    assert not _stepped_down(hist, 1, ALPHA)  # not even one hour


def _proposed(p: ForecastLedProcurer, hist: np.ndarray, committed: int) -> int:
    ctx = ProcurementContext(len(hist) * 3600, "h100_80gb", POOL, hist, None, committed, 8, term_h=WEEK)
    return sum(x.units for x in p.propose(ctx))


def test_the_procurer_renews_nothing_into_a_step_down_and_renews_at_the_new_level() -> None:
    """Two weeks at 100 GPUs, then 10: two hours into the drop, with nothing committed at the lead time, the loop's
    procurer holds; without the hold it renews at the old level. A day later the hold is off."""
    base = ControlLoop.gpufleet(seed=0).procurer
    assert isinstance(base, ForecastLedProcurer) and base.step_down_h == 2
    off = dataclasses.replace(base, step_down_h=None, books_={})
    hist = _series(16, drop_at_h=14 * 24)
    old_level = _proposed(off, hist[: 14 * 24 + 2], 0)
    assert old_level >= 40  # the forecast rules read days of history: the old level
    assert _proposed(dataclasses.replace(base, books_={}), hist[: 14 * 24 + 2], 0) == 0
    # one low hour alone (the last hour may be partly measured when the service plans) does not hold
    assert _proposed(dataclasses.replace(base, books_={}), hist[: 14 * 24 + 1], 0) > 0
    # a day into the drop the same hours yesterday were low too: no hold, and less is bought than at the old level
    day_later = _proposed(dataclasses.replace(base, books_={}), hist[: 15 * 24 + 2], 0)
    assert day_later == _proposed(off, hist[: 15 * 24 + 2], 0)
    assert 0 < day_later < old_level
