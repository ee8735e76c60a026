"""The autoscaling benchmark harness: trace readers, gap rule, the queue model and the issue's JSON."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.autoscale.baselines import StaticPolicy
from gpufleet.autoscale.throughput import ReplicaThroughputModel
from gpufleet.bench.autoscale import BenchSettings, run, static_peak_replicas, to_json
from gpufleet.bench.autoscale_sim import simulate
from gpufleet.bench.autoscale_traces import find_gaps, load_traces, request_trace
from gpufleet.domain.errors import ValidationError


def test_fluid_queue_matches_a_hand_computed_burst() -> None:
    # 10 requests of 1 replica-second each at t=0 on 2 ready replicas: fluid FIFO starts the k-th at k/2 s
    tr = request_trace("burst", np.zeros(10), np.ones(10), 0.1)
    r = simulate(tr, StaticPolicy(2), cold_start_s=0, slo_s=2.0, gpus_per_replica=1, initial_replicas=2)
    # starts at 0, 0.5, 1, ..., 4.5 s: 5 of 10 wait <= 2 s
    assert r.slo_attainment == pytest.approx(0.5)
    assert r.worst_hour_slo == pytest.approx(0.5)
    assert r.unserved == 0


def test_gap_rule_marks_empty_windows_of_a_busy_series_only() -> None:
    busy = np.full(300, 2_000.0)
    busy[100:110] = 0.0
    busy[110] = 14.0  # a partial window at the end of an outage
    assert find_gaps(busy, 600).sum() == 11
    quiet = np.zeros(300)
    quiet[::7] = 0.01  # a genuinely intermittent series: its zeros are demand
    assert find_gaps(quiet, 600).sum() == 0


def test_series_file_replays_with_a_seed(tmp_path: Path) -> None:
    p = tmp_path / "rates.csv"
    rows = ["timestamp,series_id,value"]
    for i in range(36):
        rows.append(f"2024-01-01T{i // 6:02d}:{(i % 6) * 10:02d}:00Z,s,{20 + 10 * (i % 5)}")
    p.write_text("\n".join(rows) + "\n")
    m = ReplicaThroughputModel()
    a = load_traces(p, model=m, seed=3)[0]
    b = load_traces(p, model=m, seed=3)[0]
    assert np.array_equal(a.count, b.count) and a.count.sum() > 0
    (res,) = run(p, st=BenchSettings(cold_start_s=60))
    js = to_json(res)
    assert set(js) == {"trace", "policies", "analysis"}  # analysis: the clairvoyant oracle row
    assert set(js["policies"]) == {"gpufleet", "static_peak", "hpa", "kpa"}
    for v in js["policies"].values():
        assert set(v) == {"gpu_hours", "slo_attainment", "cold_starts"}
        assert 0.0 <= v["slo_attainment"] <= 1.0


def test_unknown_format_is_a_validation_error(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValidationError):
        load_traces(p, model=ReplicaThroughputModel())


@pytest.mark.data
def test_azure_trace_runs_all_policies_in_seconds(shared_data: Path) -> None:
    (res,) = run(shared_data / "serving" / "AzureLLMInferenceTrace_code.csv", st=BenchSettings())
    assert res.trace.count.sum() == 8_819
    assert all(w < 10 for w in res.wall_s.values())
    assert all(r.unserved == 0 for r in res.results.values())


def test_static_peak_is_the_fewest_replicas_meeting_the_slo_at_peak() -> None:
    # 10 requests of 1 replica-s at t=0: with n replicas the k-th starts at k/n s; all 10 within 2 s needs n >= 5
    tr = request_trace("burst", np.zeros(10), np.ones(10), 0.1)
    st = BenchSettings(slo_s=2.0, static_attainment=0.99)
    n = static_peak_replicas(tr, 1.0, st)
    assert n == 5
    at = [
        simulate(tr, StaticPolicy(k), cold_start_s=0, slo_s=2.0, gpus_per_replica=1, initial_replicas=k)
        for k in (n - 1, n)
    ]
    assert at[0].worst_hour_slo < 0.99 <= at[1].worst_hour_slo


def test_a_request_arriving_at_zero_replicas_waits_for_one_even_with_an_empty_queue() -> None:
    # one request at t = 5 s, no replica until the policy launches one (ready 30 s later): it waits ~25 s
    tr = request_trace("lone", np.array([5.0]), np.array([0.5]), 0.1)
    r = simulate(tr, StaticPolicy(1, period_s=5.0), cold_start_s=30.0, slo_s=2.0, gpus_per_replica=1)
    assert r.slo_attainment == 0.0
    assert r.p99_wait_s == pytest.approx(25.0, abs=0.2)
