"""Validation origins of the serving ensemble: phase-aligned whole seasons back from the end when the history holds
enough of them, spread evenly otherwise."""

from __future__ import annotations

import numpy as np

from gpufleet.forecast import ServingForecaster


def _hourly(n_days: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(24 * n_days)
    walk = np.cumsum(rng.normal(0, 2, t.size))
    return np.maximum(0.0, 300 + walk + 40 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 5, t.size))


def test_long_history_uses_origins_a_whole_number_of_days_back_from_the_end() -> None:
    n = 24 * 30
    m = ServingForecaster((24, 168))
    origins = m._origins(n, 48, 24)
    assert len(origins) == (n - 24 - 48) // 24 + 1 >= 20
    assert np.all((n - origins) % 24 == 0)
    assert origins[-1] == n - 24 and origins[0] >= 48
    assert np.all(np.diff(origins) == 24)


def test_aligned_origins_are_capped_at_max_origins_most_recent() -> None:
    n = 24 * 100
    origins = ServingForecaster((24,), max_origins=30)._origins(n, 48, 24)
    assert len(origins) == 30 and origins[-1] == n - 24


def test_short_history_or_no_season_or_switched_off_spreads_origins() -> None:
    n = 24 * 14  # 12 aligned windows: fewer than max_origins // 2
    spread = np.unique(np.linspace(48, n - 1, 40).round().astype(int))
    np.testing.assert_array_equal(ServingForecaster((24,))._origins(n, 48, 24), spread)
    long_n = 24 * 30
    long_spread = np.unique(np.linspace(48, long_n - 1, 40).round().astype(int))
    np.testing.assert_array_equal(ServingForecaster((24,), phase_aligned=False)._origins(long_n, 48, 24), long_spread)
    no_season = np.unique(np.linspace(3, long_n - 1, 40).round().astype(int))
    np.testing.assert_array_equal(ServingForecaster(())._origins(long_n, 3, 1), no_season)


def test_quantiles_stay_ordered_finite_and_non_negative_on_the_aligned_path() -> None:
    y = _hourly(30, seed=11)
    y[-30:] *= 0.5  # a late level drop, as on the helios Saturday
    for h in (12, 24, 48):
        fc = ServingForecaster((24, 168)).fit(y).predict(h)
        assert np.all(np.diff(fc.values, axis=0) >= 0)
        assert np.all(np.isfinite(fc.values)) and np.all(fc.values >= 0)
        assert fc.values.shape[1] == h


def test_aligned_and_spread_origins_both_give_sensible_bands() -> None:
    y = _hourly(30, seed=12)
    for aligned in (True, False):
        fc = ServingForecaster((24, 168), phase_aligned=aligned).fit(y[:-24]).predict(24)
        inside = np.mean((y[-24:] >= fc.at(0.1)) & (y[-24:] <= fc.at(0.9)))
        assert inside >= 0.5
        assert np.all(fc.at(0.9) > fc.at(0.1))
