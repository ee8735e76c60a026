"""Weighted split-conformal tails (issue 21, session 11: the bench setting ``calibrated_conformal``) and the
model choice on 5 tracked windows (the default since session 11)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.bench.forecast import GPUFLEET_SETTINGS, model_factories
from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.aci import AciSettings, conformal_tail_factors
from gpufleet.forecast.conformal import CHOICE_WINDOWS, SWITCH_MARGIN, CalibratedForecaster
from gpufleet.forecast.engine import GpufleetForecaster

QS = (0.1, 0.5, 0.9)


def _row(actual: np.ndarray, half_width: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = len(actual)
    return np.zeros(h), np.vstack([-half_width * np.ones(h), np.zeros(h), half_width * np.ones(h)]), actual


def test_the_multiplier_is_the_quantile_of_the_scale_free_scores() -> None:
    a = np.linspace(-2.0, 2.0, 201)  # actuals spread evenly over twice the half-band on each side
    st = AciSettings(target=0.8)  # each tail aims at a miss share of 0.1
    for half in (1.0, 7.0):  # the score is in units of the half-band: the multiplier does not depend on it
        lo, hi = conformal_tail_factors([_row(a * half, half)], QS, st)
        # 10% of the actuals lie beyond c + f x half: f = the 90th percentile of a / half = 1.6
        assert hi == pytest.approx(1.6, abs=0.03) and lo == pytest.approx(1.6, abs=0.03)
        inside = np.mean(np.abs(a) <= hi)
        assert inside == pytest.approx(0.8, abs=0.02)


def test_a_band_never_left_is_narrowed_to_the_bound_and_one_always_left_is_capped() -> None:
    calm = [_row(np.zeros(24)) for _ in range(4)]
    assert conformal_tail_factors(calm, QS) == (0.25, 0.25)
    wild = [_row(np.where(np.arange(24) % 2, 50.0, -50.0)) for _ in range(4)]
    assert conformal_tail_factors(wild, QS, AciSettings(bounds=(0.5, 2.0))) == (2.0, 2.0)


def test_decay_forgets_old_windows() -> None:
    shock = _row(np.full(24, 3.0))  # every actual at 3 half-bands above the median
    calm = _row(np.linspace(-0.5, 0.5, 24))
    rows = [calm, calm, shock, shock]  # newest first: the shocks are the two oldest windows
    flat = conformal_tail_factors(rows, QS, AciSettings(windows=4, decay=1.0))[1]
    forget = conformal_tail_factors(rows, QS, AciSettings(windows=4, decay=0.2))[1]
    assert flat == pytest.approx(3.0) and forget < 0.6
    assert conformal_tail_factors(rows, QS, AciSettings(windows=2))[1] < 0.6  # only the 2 newest windows read


def test_windows_without_actuals_and_missing_tails_leave_the_multiplier_at_one() -> None:
    assert conformal_tail_factors([_row(np.full(24, np.nan))], QS) == (1.0, 1.0)
    c, sp, a = _row(np.full(24, 0.5))
    lo, hi = conformal_tail_factors([(c, sp[1:], a)], (0.5, 0.9))  # no level below the median
    assert lo == 1.0 and hi == pytest.approx(0.5)


def test_settings_and_choice_windows_are_checked() -> None:
    with pytest.raises(ValidationError):
        AciSettings(decay=0.0)
    with pytest.raises(ValidationError):
        AciSettings(pool="days")
    with pytest.raises(ValidationError):
        GpufleetForecaster(choice_windows=0)


def test_the_loop_forecaster_chooses_on_four_windows_with_a_margin_and_the_bench_settings_reach_it() -> None:
    rng = np.random.default_rng(5)
    k = np.arange(24 * 21)
    y = 100 + 30 * np.sin(2 * np.pi * k / 24) + rng.normal(0, 5.0, k.size)
    g = GpufleetForecaster()
    g.forecast(y, 3600, 24)
    assert CHOICE_WINDOWS == 4 and g.last_ is not None and g.last_.windows == 4
    assert SWITCH_MARGIN == 0.1 and g.last_.switch_margin == 0.1
    conformal = GpufleetForecaster(interval="conformal", aci=AciSettings(windows=16, decay=0.85))
    fc = conformal.forecast(y, 3600, 24)
    cal = conformal.last_
    assert isinstance(cal, CalibratedForecaster) and cal.interval == "conformal"
    lo, hi = cal.tail_factors_
    np.testing.assert_array_equal(cal.factors_, np.array([[lo], [1.0], [hi]]) * np.ones((1, 24)))
    assert np.all(np.diff(fc.values, axis=0) >= 0)
    for setting in GPUFLEET_SETTINGS:
        model = model_factories(3600, 0, ("gpufleet",), setting)["gpufleet"]()
        out = model.fit(y).predict(24, QS)
        assert out.values.shape == (3, 24) and np.all(np.isfinite(out.values)), setting
