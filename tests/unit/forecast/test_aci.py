"""Adaptive conformal tails (issue 21, session 10): bands narrowed as well as widened from the tracked windows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np
import pytest

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.aci import AciSettings, aci_tail_factors
from gpufleet.forecast.baselines import seasonal_naive
from gpufleet.forecast.conformal import CalibratedForecaster
from gpufleet.forecast.engine import GpufleetForecaster
from gpufleet.forecast.quantiles import FloatArray, make_forecast
from gpufleet.ports import DemandForecast

QS = (0.1, 0.5, 0.9)


def _row(actual: np.ndarray, half_width: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = len(actual)
    return np.zeros(h), np.vstack([-half_width * np.ones(h), np.zeros(h), half_width * np.ones(h)]), actual


def test_every_actual_above_the_band_widens_only_the_upper_tail_by_the_step() -> None:
    st = AciSettings(step=0.1, bounds=(0.25, 4.0))
    rows = [_row(np.full(24, 5.0)) for _ in range(3)]  # every point above the 0.9 row, none below the 0.1 row
    lo, hi = aci_tail_factors(rows, QS, st)
    aim = 0.1 * (1 - st.target) / 0.2
    assert hi == pytest.approx(np.exp(3 * 0.1 * (1 - aim)))
    assert lo == pytest.approx(np.exp(3 * 0.1 * (0 - aim)))  # never left below: narrowed


def test_a_band_never_left_is_narrowed_and_one_always_left_is_capped() -> None:
    calm = [_row(np.zeros(24)) for _ in range(8)]
    lo, hi = aci_tail_factors(calm, QS)
    assert lo < 1.0 and hi < 1.0 and lo == pytest.approx(hi)
    wild = [_row(np.where(np.arange(24) % 2, 50.0, -50.0)) for _ in range(200)]
    lo, hi = aci_tail_factors(wild, QS, AciSettings(windows=200, bounds=(0.5, 2.0)))
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_windows_without_actuals_and_missing_tails_leave_the_multiplier_at_one() -> None:
    assert aci_tail_factors([_row(np.full(24, np.nan))], QS) == (1.0, 1.0)
    c, sp, a = _row(np.full(24, 5.0))
    lo, hi = aci_tail_factors([(c, sp[1:], a)], (0.5, 0.9))  # no level below the median
    assert lo == 1.0 and hi > 1.0


def test_each_window_is_judged_against_the_band_as_recalibrated_by_the_older_ones() -> None:
    st = AciSettings()
    aim = 0.1 * (1 - st.target) / 0.2
    just_above = _row(np.full(24, 1.05))  # above the raw 0.9 row, inside it once widened by 12%
    lo, hi = aci_tail_factors([just_above, just_above], QS, st)
    # the older window widened the upper tail by exp(0.12 x (1 - aim)) > 1.05; the newer one is then covered
    assert hi == pytest.approx(np.exp(st.step * (1 - aim) - st.step * aim))
    assert lo == pytest.approx(np.exp(-2 * st.step * aim))


def test_settings_are_checked() -> None:
    with pytest.raises(ValidationError):
        AciSettings(target=1.5)
    with pytest.raises(ValidationError):
        AciSettings(bounds=(1.5, 4.0))
    with pytest.raises(ValidationError):
        GpufleetForecaster(interval="both")


class _Scaled:
    """Seasonal naive with its band scaled by ``k`` (k > 1: far too wide for the series)."""

    name = "scaled"

    def __init__(self, k: float) -> None:
        self.k = k
        self.inner = seasonal_naive(24)

    def fit(self, y: FloatArray) -> Self:
        self.inner.fit(y)
        return self

    def predict(self, h: int, quantiles: Sequence[float] = QS) -> DemandForecast:
        fc = self.inner.predict(h, quantiles)
        c = fc.at(0.5)
        return make_forecast(fc.mean, c + self.k * (fc.values - c), fc.levels, self.name)


def test_a_band_far_too_wide_is_narrowed_from_its_own_tracked_windows() -> None:
    rng = np.random.default_rng(3)
    k = np.arange(24 * 14)
    y = 100 + 30 * np.sin(2 * np.pi * k / 24) + rng.normal(0, 5.0, k.size)
    wide = CalibratedForecaster({"wide": lambda: _Scaled(5.0)}, season=24).fit(y)
    fc = wide.predict(24, QS)
    raw = _Scaled(5.0).fit(y).predict(24, QS)
    lo, hi = wide.tail_factors_
    assert lo < 1.0 and hi < 1.0
    assert np.all(fc.at(0.9) - fc.at(0.1) < raw.at(0.9) - raw.at(0.1))
    np.testing.assert_allclose(fc.at(0.5), raw.at(0.5))  # the median is not moved
    old = CalibratedForecaster({"wide": lambda: _Scaled(5.0)}, season=24, interval="widen").fit(y)
    np.testing.assert_allclose(old.predict(24, QS).values, raw.values)  # widening only: kept too wide
