"""The procurer's hold on a step down (control/procurement.py, ``drop_hold_h``): no new commitment while each of the
last three hours is below the same hour on every one of the five days before it."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpufleet.control.loop import ControlLoop
from gpufleet.control.procurement import ForecastLedProcurer, _dropped
from gpufleet.domain.catalog import default_pools
from gpufleet.ports import ProcurementContext

POOL = default_pools("h100_80gb", reserved_term_months=1, reserved_lead_time_s=24 * 3600)[0]
WEEK = 7 * 24


def _series(days: int, drop_at_h: int | None, seed: int = 5, noise: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    h = np.arange(days * 24)
    level = np.where(h < drop_at_h, 100.0, 10.0) if drop_at_h is not None else np.full(len(h), 100.0)
    return np.maximum(0.0, level * (1 + 0.2 * np.sin(2 * np.pi * (h % 24) / 24)) + rng.normal(0, noise, len(h)))


def test_a_drop_is_three_hours_below_every_one_of_the_five_days_before() -> None:
    hist = _series(14, drop_at_h=13 * 24, noise=0.0)  # every day alike before the drop: no hour below them by chance
    assert not _dropped(hist[: 13 * 24 + 2], 3)  # two hours into the drop: not yet
    assert _dropped(hist[: 13 * 24 + 3], 3)
    assert not _dropped(_series(14, None, noise=0.0), 3)  # a steady diurnal series
    assert not _dropped(hist[: 4 * 24], 3)  # fewer than five days before: never


def _proposed(p: ForecastLedProcurer, hist: np.ndarray, committed: int) -> int:
    ctx = ProcurementContext(len(hist) * 3600, "h100_80gb", POOL, hist, None, committed, 8, term_h=WEEK)
    return sum(x.units for x in p.propose(ctx))


def test_the_procurer_renews_nothing_into_a_drop_and_renews_once_it_is_the_level() -> None:
    """Two weeks at 100 GPUs, then 10: three hours into the drop, with the first week's commitments expiring (none
    committed at the lead time), the loop's procurer holds; without the hold it renews at the old level."""
    base = ControlLoop.gpufleet(seed=0).procurer
    assert isinstance(base, ForecastLedProcurer) and base.drop_hold_h == 3
    off = dataclasses.replace(base, drop_hold_h=None, books_={})
    hist = _series(16, drop_at_h=14 * 24)[: 14 * 24 + 3]
    assert _proposed(off, hist, 0) >= 40  # the forecast rules read days of history: the old level
    assert _proposed(dataclasses.replace(base, books_={}), hist, 0) == 0
