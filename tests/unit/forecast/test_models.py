"""Model behaviour: seasonality, routing, calibration on a known process, training known part, capacity."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.domain.errors import ValidationError
from gpufleet.domain.skus import sku
from gpufleet.forecast import (
    AutoForecaster,
    BacklogRequest,
    CapacityPolicy,
    GrowthScenario,
    ServingForecaster,
    SkuThroughput,
    TrainingForecaster,
    apply_growth,
    capacity_forecast,
    classify,
    forecast_demand,
    gpus_needed,
    seasons_for_step,
)
from gpufleet.forecast.gaps import fill_gaps, mark_gaps, mark_outliers
from gpufleet.forecast.intermittent import adida, croston, imapa, tsb
from gpufleet.ports import PlannedRunRegistration


def test_seasons_follow_the_grid() -> None:
    assert seasons_for_step(3600) == (24, 168)
    assert seasons_for_step(600) == (144, 1008)
    assert seasons_for_step(86_400) == (7,)


def test_serving_model_follows_a_daily_cycle() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(24 * 28 + 24)
    y = 200 + 80 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 5, t.size)
    fc = ServingForecaster((24, 168)).fit(y[:-24]).predict(24)
    err = np.abs(fc.mean - y[-24:])
    assert err.mean() < 15


def test_interval_is_calibrated_on_a_known_process() -> None:
    # random walk + daily cycle: over many origins the 80% band should hold about 80% of the outcomes
    rng = np.random.default_rng(4)
    inside = total = 0
    for _ in range(12):
        t = np.arange(24 * 20 + 24)
        y = 500 + np.cumsum(rng.normal(0, 4, t.size)) + 40 * np.sin(2 * np.pi * t / 24)
        fc = ServingForecaster((24,)).fit(y[:-24]).predict(24)
        a = y[-24:]
        inside += int(np.sum((a >= fc.at(0.1)) & (a <= fc.at(0.9))))
        total += 24
    assert 0.65 <= inside / total <= 0.97


def test_router_sends_lumpy_series_to_croston_family() -> None:
    y = np.zeros(600)
    y[::60] = np.resize([8.0, 64.0, 8.0, 128.0, 16.0], y[::60].size)  # whole days without a job
    m = AutoForecaster((24,)).fit(y)
    assert m.route_.demand_class == "lumpy"
    assert "intermittent" in m.predict(3).method


def test_router_keeps_night_zeros_in_a_daily_cycle_seasonal() -> None:
    t = np.arange(24 * 14)
    y = np.maximum(0.0, 100 * np.sin(2 * np.pi * t / 24))  # zero half of every day
    m = AutoForecaster((24,)).fit(y)
    assert m.route_.reason == "seasonal_zeros"
    assert m.predict(24).method == "gpufleet"


def test_classification_cutoffs() -> None:
    assert classify(np.full(50, 10.0)).demand_class == "smooth"
    y = np.zeros(50)
    y[::5] = 10.0
    assert classify(y).demand_class == "intermittent"
    assert classify(np.zeros(10)).demand_class == "zero"


def test_croston_family_on_a_regular_pattern() -> None:
    y = np.zeros(60)
    y[::4] = 8.0  # 8 units every 4 periods = 2 per period
    rate, p = croston(y, 0.1)
    assert rate == pytest.approx(2.0, rel=0.05) and p == pytest.approx(0.25, rel=0.05)
    assert croston(y, 0.1, sba=True)[0] == pytest.approx(2.0 * 0.95, rel=0.05)
    assert tsb(y)[0] == pytest.approx(2.0, rel=0.35)
    assert adida(y, 4) == pytest.approx(2.0)
    assert imapa(y, 4) == pytest.approx(2.0, rel=0.2)


def test_croston_counts_the_interval_still_open_since_the_last_demand() -> None:
    # one job of 1000 a month ago and nothing since: not "1000 every period" (what Croston said before)
    once = np.r_[[1000.0], np.zeros(29)]
    rate, p = croston(once, 0.1, sba=True)
    assert p == pytest.approx(1 / 30) and rate == pytest.approx(1000 * 0.95 / 30)
    fc = forecast_demand(once, 7, quantiles=(0.5, 0.9))
    assert (fc.at(0.5) == 0.0).all() and (fc.at(0.9) == 0.0).all()
    # a regular pattern mid-cycle keeps its interval (the open interval is shorter than it)
    y = np.zeros(62)
    y[::4] = 8.0
    assert croston(y, 0.1)[1] == pytest.approx(0.25, rel=0.05)


def test_outliers_are_a_minority_or_nothing() -> None:
    # values repeated in pairs make the median step 0: every point looked like an isolated spike, and the
    # forecast refused the history as "every point is a gap" (found by a Hypothesis test)
    pairs = np.array([607.76, 604.75, 151.80, 151.80, 471.97, 471.97])
    assert not mark_outliers(pairs).any()
    spiky = np.full(40, 100.0) + np.arange(40) % 3
    spiky[20] = 1e7
    assert mark_outliers(spiky).tolist() == [i == 20 for i in range(40)]


def test_gap_marking_keeps_real_zeros_of_intermittent_demand() -> None:
    busy = np.full(100, 50.0)
    busy[40:45] = 0.0
    assert mark_gaps(busy, 10)[40:45].all() and not mark_gaps(busy, 10)[:40].any()
    lumpy = np.zeros(100)
    lumpy[::3] = 5.0
    assert not mark_gaps(lumpy, 10).any()


def test_fill_gaps_uses_the_previous_season() -> None:
    y = np.tile([1.0, 5.0, 9.0, 5.0], 6)
    g = np.zeros(y.size, dtype=bool)
    g[9:11] = True
    filled = fill_gaps(np.where(g, np.nan, y), g, 4)
    assert filled[9:11] == pytest.approx(y[9:11])


def _run(gpus: int, start_s: int, duration_s: int, probability: float = 1.0) -> PlannedRunRegistration:
    return PlannedRunRegistration("pretrain", "research", "h100_80gb", gpus, start_s, duration_s, probability)


def test_training_known_part_is_exact_and_quantiles_jump() -> None:
    rng = np.random.default_rng(5)
    hist = np.zeros(100)
    origin = 1_000 * 3600
    m = TrainingForecaster(rng=rng).fit(
        hist,
        planned_runs=[_run(512, origin + 2 * 3600, 3 * 3600, probability=0.5)],
        origin_s=origin,
        step_s=3600,
        backlog=[BacklogRequest(gpus=16, start_step=0, duration_steps=4)],
    )
    assert m.known_mean(6) == pytest.approx([16, 16, 16 + 256, 16 + 256, 256, 0])
    fc = m.predict(6, (0.25, 0.75))
    assert fc.at(0.25)[2] == pytest.approx(16) and fc.at(0.75)[2] == pytest.approx(16 + 512)


@pytest.mark.parametrize(
    ("start_s", "duration_s", "active"),
    [
        (0, 3600, [1, 0, 0, 0]),  # exactly one step
        (1800, 1, [1, 0, 0, 0]),  # start floors to its step; a short run takes at least one step
        (3600, 3601, [0, 1, 1, 0]),  # duration ceils
        (-7200, 3 * 3600, [1, 0, 0, 0]),  # started before the origin: the steps it still has
        (-7200, 3600, [0, 0, 0, 0]),  # over before the origin
        (5 * 3600, 3600, [0, 0, 0, 0]),  # after the horizon
    ],
)
def test_planned_runs_are_laid_on_the_grid(start_s: int, duration_s: int, active: list[int]) -> None:
    origin = 86_400
    m = TrainingForecaster(rng=np.random.default_rng(0)).fit(
        np.zeros(10), planned_runs=[_run(8, origin + start_s, duration_s)], origin_s=origin, step_s=3600
    )
    assert m.known_mean(4).tolist() == [8.0 * a for a in active]


def test_planned_runs_need_the_time_axis() -> None:
    fc = TrainingForecaster(rng=np.random.default_rng(0))
    with pytest.raises(ValidationError, match="origin_s"):
        fc.fit(np.zeros(10), planned_runs=[_run(8, 0, 3600)])
    with pytest.raises(ValidationError, match="step_s"):
        fc.fit(np.zeros(10), planned_runs=[_run(8, 0, 3600)], origin_s=0, step_s=0)
    assert fc.fit(np.zeros(10)).known_mean(3).tolist() == [0.0, 0.0, 0.0]  # no runs, no axis needed


def test_capacity_model_converts_traffic_quantiles_to_gpus() -> None:
    policy = CapacityPolicy(target_utilization=0.5, burst_headroom=0.0, min_replicas=1)
    tp = SkuThroughput("h100_80gb", rps_per_replica=10.0, gpus_per_replica=2)
    assert gpus_needed(np.array([0.0, 5.0, 5.1, 20.0]), tp, policy).tolist() == [2, 2, 4, 8]
    y = np.full(60, 100.0) + np.random.default_rng(6).normal(0, 5, 60)
    fc = AutoForecaster((7,)).fit(y).predict(7)
    out = capacity_forecast(fc, [tp, SkuThroughput.scaled(sku("l4"), 10.0)], policy)
    assert set(out) == {"h100_80gb", "l4"}
    assert np.all(np.diff(out["l4"].values, axis=0) >= 0)
    h100 = out["h100_80gb"]
    assert h100.levels == fc.levels and h100.method == f"{fc.method}+capacity:h100_80gb"
    assert h100.values.tolist() == gpus_needed(fc.values, tp, policy).tolist()  # whole GPUs, as floats
    assert h100.mean.tolist() == gpus_needed(fc.mean, tp, policy).tolist()
    assert h100.at(0.5).tolist() == gpus_needed(fc.at(0.5), tp, policy).tolist()  # quantiles commute with the map
    assert out["l4"].values.min() > out["h100_80gb"].values.max() / 2  # L4 is much slower per replica


def test_growth_what_if_doubles_in_thirty_days() -> None:
    fc = AutoForecaster((7,)).fit(np.full(30, 10.0)).predict(30)
    grown = apply_growth(fc, GrowthScenario("doubles monthly", 2.0), 86_400)
    assert grown.mean[-1] == pytest.approx(2 * fc.mean[-1])
    assert np.all(np.diff(grown.values, axis=0) >= 0)


def test_training_forecast_adds_known_runs_to_lumpy_experiments() -> None:
    hist = np.zeros(24 * 20)
    hist[::53] = 32.0  # an occasional 32-GPU experiment, whole days without one
    m = TrainingForecaster((24,), rng=np.random.default_rng(8)).fit(
        hist, planned_runs=[_run(64, 20 * 86_400, 48 * 3600)], origin_s=20 * 86_400, step_s=3600
    )
    fc = m.predict(48, (0.5, 0.99))
    assert "intermittent" in fc.method
    assert np.all(fc.at(0.5) == pytest.approx(64.0))  # the run is certain; experiments are usually absent
    assert np.all(fc.at(0.99) >= 64.0) and fc.at(0.99).max() > 64.0
