"""Intervals widen when the ensemble's components disagree (e.g. right after a level shift)."""

from __future__ import annotations

import numpy as np

from gpufleet.forecast import ServingForecaster
from gpufleet.forecast.serving import _component_spread, _disagreement


def _daily(n_days: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(24 * n_days)
    return 100 + 30 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 3, t.size)


def test_component_spread_matches_a_hand_computed_example() -> None:
    # 3 components, 2 origins, 2 steps; the third component is missing at origin 0
    fcs = np.array([[[1.0, 2.0], [0.0, 0.0]], [[3.0, 4.0], [2.0, 2.0]], [[np.nan, np.nan], [4.0, 4.0]]])
    present = np.isfinite(fcs)
    spread = _component_spread(fcs, present)
    # origin 0: std of {1, 3} = 1 and of {2, 4} = 1; origin 1: std of {0, 2, 4} = sqrt(8/3) at both steps
    np.testing.assert_allclose(spread, [1.0, np.sqrt(8.0 / 3.0)])


def test_component_spread_is_nan_where_fewer_than_two_components_exist() -> None:
    fcs = np.array([[[1.0, 2.0]], [[np.nan, np.nan]]])
    assert np.isnan(_component_spread(fcs, np.isfinite(fcs))[0])


def test_disagreement_factor_is_one_when_off_or_unknown() -> None:
    np.testing.assert_allclose(_disagreement(np.array([0.3, np.nan]), 0.1, 0.0), [1.0, 1.0])
    np.testing.assert_allclose(_disagreement(np.array([0.3, np.nan]), 0.1, 1.0), [0.4, 1.0])


def test_band_is_wider_after_a_level_shift_when_disagreement_is_used() -> None:
    y = _daily(21, seed=5)
    shifted = y.copy()
    shifted[-6:] += 60.0  # the last hours jumped: naive and the seasonal components now disagree
    widths = {}
    for delta in (0.0, 1.0):
        fc = ServingForecaster((24,), deltas=(delta,)).fit(shifted).predict(24)
        widths[delta] = float(np.mean(fc.at(0.9) - fc.at(0.1)))
    assert widths[1.0] > widths[0.0]


def test_default_settings_keep_quantiles_ordered_on_a_shifted_series() -> None:
    y = _daily(21, seed=6)
    y[-30:] *= 2.5
    fc = ServingForecaster((24, 168)).fit(y).predict(48)
    assert np.all(np.diff(fc.values, axis=0) >= 0)
    assert np.all(np.isfinite(fc.values)) and np.all(fc.values >= 0)
