"""The gpufleet replica autoscaler: bounds, scale to zero with held requests, budget reporting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.baselines import HpaPolicy, KpaPolicy
from gpufleet.autoscale.forecaster import OnlineQuantileForecaster
from gpufleet.autoscale.replica import BudgetDegrade, PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.bench.autoscale_sim import simulate
from gpufleet.bench.autoscale_traces import request_trace
from gpufleet.domain.errors import ValidationError
from gpufleet.ports import ReplicaSignals


def _sig(t: float, rps: float, *, ready: int = 1, starting: int = 0, queue: int = 0) -> ReplicaSignals:
    return ReplicaSignals(t, ready, starting, 5.0, rps, rps * 0.1 + queue, queue, rps * 0.1)


load = st.lists(st.tuples(st.floats(0, 500), st.integers(0, 5000)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(0, 5),
    span=st.integers(0, 20),
    steps=load,
    budget=st.one_of(st.none(), st.floats(0, 20_000)),
)
def test_desired_replicas_stay_within_min_and_max(
    lo: int, span: int, steps: list[tuple[float, int]], budget: float | None
) -> None:
    hi = max(1, lo + span)
    cfg = ReplicaAutoscalerConfig(
        min_replicas=lo, max_replicas=hi, target_per_replica=5.0, cold_start_s=120, budget_usd_day=budget
    )
    pol = PredictiveReplicaAutoscaler(cfg)
    current = lo
    for i, (rps, queue) in enumerate(steps):
        d = pol.decide(_sig(5.0 * (i + 1), rps, ready=current, queue=queue))
        assert lo <= d.desired <= hi, d
        current = d.desired


@settings(max_examples=60, deadline=None)
@given(steps=load, budget=st.floats(0, 5_000), price=st.floats(0.5, 100))
def test_budget_cap_is_never_exceeded_silently(steps: list[tuple[float, int]], budget: float, price: float) -> None:
    cfg = ReplicaAutoscalerConfig(
        min_replicas=1,
        max_replicas=500,
        target_per_replica=2.0,
        cold_start_s=60,
        price_usd_per_replica_h=price,
        budget_usd_day=budget,
        degrade_options=(BudgetDegrade("smaller_sku", 0.4, 0.5),),
    )
    pol = PredictiveReplicaAutoscaler(cfg)
    for i, (rps, queue) in enumerate(steps):
        d = pol.decide(_sig(5.0 * (i + 1), rps, queue=queue))
        factor = 0.4 if d.degrade == "smaller_sku" else 1.0
        spend = d.desired * price * 24 * factor
        assert d.spend_usd_day == pytest.approx(spend)
        if spend > budget + 1e-6:
            assert d.budget_exceeded and d.budget_bound, d


def test_budget_binding_degrades_then_caps_and_says_so() -> None:
    cfg = ReplicaAutoscalerConfig(
        min_replicas=1,
        max_replicas=100,
        target_per_replica=1.0,
        cold_start_s=60,
        price_usd_per_replica_h=10.0,
        budget_usd_day=2_400.0,  # 10 replicas
        degrade_options=(BudgetDegrade("cheaper_sku", 0.5, 0.8),),
    )
    pol = PredictiveReplicaAutoscaler(cfg)
    d = pol.decide(_sig(5.0, 14.0))  # 12 replicas at 1.2 x 1 rps each: over the 10 the budget buys
    assert d.budget_bound and d.degrade == "cheaper_sku" and d.reason == "budget_degraded"
    d = pol.decide(_sig(10.0, 80.0))
    assert d.budget_bound and d.reason == "budget_capped" and d.desired == 10


def _intermittent_trace() -> tuple[np.ndarray, np.ndarray]:
    # bursts of requests separated by an hour of silence: the workload worth scaling to zero
    t = np.concatenate([np.linspace(0, 20, 30), np.linspace(3_600, 3_620, 30), np.linspace(9_000, 9_005, 10)])
    return t, np.full(len(t), 0.05)


def test_scale_to_zero_holds_requests_and_serves_them_after_the_cold_start() -> None:
    t, w = _intermittent_trace()
    tr = request_trace("intermittent", t, w, 0.5)
    cfg = ReplicaAutoscalerConfig(
        min_replicas=0, max_replicas=4, target_per_replica=10.0, cold_start_s=120, slo_breach_cost_usd=0.01
    )
    pol = PredictiveReplicaAutoscaler(cfg)
    r = simulate(tr, pol, cold_start_s=120, slo_s=2, gpus_per_replica=1, initial_replicas=1)
    assert r.reasons.get("scale_to_zero", 0) > 0  # it did go to zero between bursts
    # and woke up for the second burst's held requests; the third finds the replica the zero rule's miss budget
    # holds since (the held requests waited a cold start). Until session 34 a third cold start came from a launch
    # into the silence at t = 2,215 s: the recent-peak candidate, chosen the moment it became usable because its
    # loss, compared raw, summed fewer scores
    assert r.cold_starts >= 2
    assert r.reasons.get("zero_over_miss_budget", 0) > 0
    assert r.unserved == 0  # nothing dropped: every held request started
    assert np.isfinite(r.p99_wait_s) and r.p99_wait_s <= 120 + 5 + 5  # cold start + one period + drain
    assert r.gpu_hours < 9_005 / 3600  # cheaper than never scaling to zero


def test_kpa_activator_also_serves_held_requests() -> None:
    t, w = _intermittent_trace()
    tr = request_trace("intermittent", t, w, 0.5)
    r = simulate(tr, KpaPolicy(target_rps_per_replica=10.0), cold_start_s=120, slo_s=2, gpus_per_replica=1)
    assert r.unserved == 0 and r.cold_starts >= 3


def test_no_scale_to_zero_when_the_next_cold_start_costs_more_than_it_saves() -> None:
    cfg = ReplicaAutoscalerConfig(
        min_replicas=0, max_replicas=4, target_per_replica=10.0, cold_start_s=120, slo_breach_cost_usd=100.0
    )
    pol = PredictiveReplicaAutoscaler(cfg)
    pol.decide(_sig(5.0, 0.2))
    reasons = {pol.decide(_sig(5.0 * i, 0.0)).reason for i in range(2, 200)}
    assert "scale_to_zero" not in reasons and "zero_not_worth_cold_start" in reasons


def test_predictive_policy_prewarms_before_a_recurring_ramp() -> None:
    # a 2-hour "season" with a 10-minute ramp from 50 to 200 rps at the same time each season: in the second
    # season the ramp's replicas are launched before it starts
    season_s = 7_200
    cfg = ReplicaAutoscalerConfig(
        min_replicas=1, max_replicas=200, target_per_replica=5.0, cold_start_s=120, period_s=20.0
    )
    fc = OnlineQuantileForecaster(horizon_s=140.0, floor=5.0, season_s=season_s)
    pol = PredictiveReplicaAutoscaler(cfg, forecaster=fc)
    seen_before_ramp = 0
    for i in range(int(2 * season_s / 20)):
        t = 20.0 * (i + 1)
        tos = t % season_s
        rps = 200.0 if 3_600 <= tos < 4_200 else 50.0
        d = pol.decide(ReplicaSignals(t, 10, 0, 20.0, rps, rps * 0.1, 0, rps * 0.1))
        if t > season_s and 3_600 - 60 <= tos < 3_600:
            seen_before_ramp = max(seen_before_ramp, d.desired)
    assert seen_before_ramp * 5.0 * 1.2 >= 200.0


def test_hpa_never_goes_below_one_replica() -> None:
    hpa = HpaPolicy(target_utilization=0.8)
    for i in range(100):
        assert hpa.decide(ReplicaSignals(15.0 * i, 1, 0, 15.0, 0.0, 0.0, 0, 0.0)).desired >= 1


def test_config_refuses_inverted_bounds() -> None:
    with pytest.raises(ValidationError):
        ReplicaAutoscalerConfig(min_replicas=5, max_replicas=2, target_per_replica=1.0, cold_start_s=60)


def test_cheapest_sku_meeting_the_slo_wins_and_others_say_why() -> None:
    from gpufleet.autoscale.sku_choice import SkuOption, choose_sku

    opts = (
        SkuOption("h100_80gb", 4, 6.0, 27.5, 0.8, 210),
        SkuOption("a100_80gb", 4, 2.7, 13.7, 1.6, 240),
        SkuOption("l40s", 8, 1.5, 30.1, 3.5, 300),
    )
    c = choose_sku(opts, demand_rps=30.0, slo_latency_s=2.0)
    # h100: 5 x 27.5 = 137.5/h; a100: 12 x 13.7 = 164.4/h; l40s misses the SLO
    assert c.sku_id == "h100_80gb" and c.replicas == 5 and c.reason == "cheapest_meeting_slo"
    assert dict(c.rejected) == {"a100_80gb": "more_expensive", "l40s": "latency_above_slo"}
    assert choose_sku(opts, 30.0, 0.5).sku_id is None


def test_forecaster_spreads_a_long_observation_over_its_buckets() -> None:
    fc = OnlineQuantileForecaster(horizon_s=60.0, floor=1.0, bucket_s=10.0, level_window_s=30.0)
    for i in range(1, 31):
        fc.observe(30.0 * i, 12.0, 30.0)  # each observation covers three 10 s buckets
    assert fc.level() == 12.0


def test_a_quiet_fleet_is_not_asked_for_a_second_replica_while_the_forecaster_warms_up() -> None:
    """Before its residuals exist the forecaster's upper is ``warmup_ratio`` times the level: at 0.5 rps, with
    a replica carrying 5 rps, 1 rps, not ``(0.5 + 5) * 2 - 5 = 6`` rps (a second replica on every quiet start:
    issue 21's held-out low-traffic trace paid 1.12x static peak)."""
    fc = OnlineQuantileForecaster(horizon_s=125.0, floor=5.0, bucket_s=60.0)
    for i in range(10 * 12):  # ten minutes of 5 s periods
        fc.observe(5.0 * (i + 1), 0.5, 5.0)
    assert fc.upper() == pytest.approx(1.0)
    cfg = ReplicaAutoscalerConfig(min_replicas=1, max_replicas=10, target_per_replica=5.0, cold_start_s=120, slo_s=2.0)
    pol = PredictiveReplicaAutoscaler(cfg)
    desired = [pol.decide(_sig(5.0 * (i + 1), 0.5)).desired for i in range(10 * 12)]
    assert max(desired) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_candidate_that_matures_late_is_not_chosen_for_having_fewer_scores(seed: int) -> None:
    """The forecaster picks the candidate with the lowest *mean* recent pinball loss. Each loss is an EWMA started
    at 0, so read raw it is about a sum for a candidate scored for less than its half-life: the seasonal
    candidate, usable only after a day, then won on day 2 whatever its errors. Here the series has no daily pattern
    (log-normal noise around 10), so the seasonal point forecast is noise; before the bias correction it was
    chosen for 16-36 of day 2's 144 buckets on these seeds."""
    rng = np.random.default_rng(seed)
    series = 10.0 * np.exp(rng.normal(0.0, 0.15, 144 * 3))
    fc = OnlineQuantileForecaster(
        horizon_s=1_200.0,
        floor=5.0,
        bucket_s=600.0,
        level_window_s=600.0,
        slow_window_s=4_800.0,
        loss_halflife_buckets=144.0,
    )
    chosen = []
    for i, v in enumerate(series):
        fc.observe(600.0 * (i + 1), float(v), 600.0)
        chosen.append(fc.chosen)
    seasonal = 1  # CANDIDATES[1]: the level times the seasonal growth, log residuals
    assert seasonal not in chosen[144:]


def test_before_its_errors_are_measured_the_fleet_is_sized_at_the_target_utilization() -> None:
    """The autoscaler's forecaster warms up at ``peak_headroom`` times the level: sized at the hot utilization,
    that is the level at the target utilization (HPA's rule). At 4 rps, exactly one replica's target load, one
    replica; a warm-up ratio of 2 asked for two for the first half hour (``ceil(8 / 4.8)``): a smooth trace one
    replica serves paid 1.5x static peak (docs/autoscale.md, step 2)."""
    cfg = ReplicaAutoscalerConfig(min_replicas=1, max_replicas=10, target_per_replica=4.0, cold_start_s=120, slo_s=2.0)
    pol = PredictiveReplicaAutoscaler(cfg)
    desired = [pol.decide(_sig(5.0 * (i + 1), 4.0)).desired for i in range(10 * 12)]
    assert pol.forecaster.upper() == pytest.approx(4.0 * cfg.peak_headroom)
    assert max(desired) == 1
