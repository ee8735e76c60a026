"""Accuracy tracking against a hand-computed example, and model weights adapting to it."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.forecast import AccuracyTracker, IssuedForecast
from gpufleet.forecast.quantiles import make_forecast


def _issued(model: str, mean: list[float], lo: list[float], hi: list[float], issued_at_s: int = 0) -> IssuedForecast:
    fc = make_forecast(np.array(mean), np.array([lo, mean, hi]), (0.1, 0.5, 0.9), model)
    return IssuedForecast("svc-a", model, issued_at_s, start_s=100, step_s=10, scale=2.0, forecast=fc)


def test_scores_match_a_hand_computed_example() -> None:
    tr = AccuracyTracker()
    tr.record(_issued("m", mean=[10, 10, 10], lo=[8, 8, 8], hi=[12, 12, 12]))
    # nothing is scored before the last step's time
    assert tr.observe("svc-a", [100, 110], [9.0, 13.0], now_s=115) == []
    recs = tr.observe("svc-a", [120], [10.0], now_s=120)
    assert len(recs) == 1
    r = recs[0]
    # MASE: |9-10|, |13-10|, |10-10| -> mean 4/3, / scale 2 -> 2/3
    assert r.mase == pytest.approx(2 / 3)
    # pinball, q=0.1 (f=8): d = 1, 5, 2 -> 0.1, 0.5, 0.2 -> mean 0.8/3
    #          q=0.5 (f=10): d = -1, 3, 0 -> 0.5, 1.5, 0 -> mean 2/3
    #          q=0.9 (f=12): d = -3, 1, -2 -> 0.3, 0.9, 0.2 -> mean 1.4/3
    # mean over q = (0.8 + 2 + 1.4) / 9 = 4.2 / 9; / scale 2 -> 0.2333...
    assert r.pinball == pytest.approx(4.2 / 9 / 2)
    # coverage: 9 in [8,12], 13 not, 10 in -> 2/3
    assert r.coverage_80 == pytest.approx(2 / 3)
    assert r.n_points == 3 and r.issued_at_s == 0 and r.scored_at_s == 120


def test_missing_actuals_are_skipped_not_counted_as_zero() -> None:
    tr = AccuracyTracker()
    tr.record(_issued("m", mean=[10, 10, 10], lo=[8, 8, 8], hi=[12, 12, 12]))
    (r,) = tr.observe("svc-a", [100, 120], [9.0, 10.0], now_s=200)
    assert r.n_points == 2 and r.mase == pytest.approx(0.25)


def test_weights_and_selection_follow_recent_accuracy() -> None:
    tr = AccuracyTracker()
    for day in range(3):
        tr.record(_issued("good", [10, 10, 10], [9, 9, 9], [11, 11, 11], issued_at_s=day))
        tr.record(_issued("bad", [20, 20, 20], [15, 15, 15], [25, 25, 25], issued_at_s=day))
    assert tr.select("svc-a", ["good", "bad"], default="bad") == ("bad", "not_all_models_scored")
    tr.observe("svc-a", [100, 110, 120], [10.0, 10.0, 10.0], now_s=120)
    w = tr.model_weights("svc-a", ["good", "bad"])
    assert w["good"] > 0.9 and w["good"] + w["bad"] == pytest.approx(1.0)
    assert tr.select("svc-a", ["good", "bad"], default="bad") == ("good", "lowest_recent_pinball")
    summary = tr.summary("svc-a", "good")
    assert summary["n"] == 3 and summary["mase"] == pytest.approx(0.0)


def test_a_stored_forecast_reads_back_as_the_issued_forecast_and_is_scored_on_its_elapsed_steps() -> None:
    """One noun for a forecast as issued: a store keeps the quantile rows; ``of_quantiles`` gives back the
    IssuedForecast (the p50 row as its mean) that ``control.forecasting.score_forecasts`` scores."""
    from gpufleet.control.forecasting import score_forecasts
    from gpufleet.domain.errors import ValidationError

    rows = np.array([[8.0, 8, 8], [10, 10, 10], [12, 12, 12]])
    got = IssuedForecast.of_quantiles("svc-a", "m", 0, 100, 10, 2.0, (0.1, 0.5, 0.9), rows)
    assert (got.series_id, got.model, got.start_s, got.step_s, got.scale) == ("svc-a", "m", 100, 10, 2.0)
    assert np.array_equal(got.forecast.mean, rows[1]) and np.array_equal(got.forecast.values, rows)
    assert got.forecast.levels == (0.1, 0.5, 0.9) and got.forecast.method == "m" and got.end_s == 120
    assert got.first_steps(2).forecast.horizon == 2 and got.first_steps(2).end_s == 110
    with pytest.raises(ValidationError, match="p50"):
        IssuedForecast.of_quantiles("svc-a", "m", 0, 100, 10, 2.0, (0.1, 0.9), rows[[0, 2]])
    # at now = 120 two steps (100, 110) have fully elapsed: scored on those two, as the hand example's first two
    tracker, pending = score_forecasts([got], {"svc-a": {100: 9.0, 110: 13.0, 120: 10.0}}, now_s=120)
    (rec,) = tracker.history["svc-a"]
    assert pending == {} and rec.n_points == 2
    assert rec.mase == pytest.approx((1 + 3) / 2 / 2.0)  # |9-10|, |13-10| over the scale 2
    assert rec.coverage_80 == pytest.approx(1 / 2)  # 9 in [8, 12], 13 not
    _, later = score_forecasts([got], {"svc-a": {}}, now_s=120)
    assert later == {"svc-a": 1}  # no actual on an elapsed step: pending, not scored as zero
