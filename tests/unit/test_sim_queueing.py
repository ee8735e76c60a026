"""The simulator's serving queue (sim/queueing.PeriodQueue) against the step-by-step pools the bench replays, and
in the closed loop: SLO attainment from queue waits, the queue's measurements reaching the replica autoscaler."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.bench.autoscale_traces import request_trace
from gpufleet.control.loop import ControlLoop
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.queueing import BatchedPool, ExclusivePool, PeriodQueue, erlang_c_tail
from gpufleet.sim.run import simulate
from gpufleet.sim.world import World


def batched_misses(rate: float, work: float, slo: float, duration: float, ready: int, ready_at_s: float = 0.0) -> float:
    """Reference: the bench's fluid pool on a 0.05 s grid, evenly spaced requests; ``ready`` replicas from
    ``ready_at_s`` (none before)."""
    n = int(rate * duration)
    t = (np.arange(n) + 0.5) / rate
    step = 0.05
    tr = request_trace("t", t, np.full(n, work), step)
    tail = int(600 / step)
    a = np.cumsum(np.concatenate([tr.work_s, np.zeros(tail)]))
    cnt = np.cumsum(np.concatenate([tr.count, np.zeros(tail, np.int64)]))
    pool = BatchedPool(tr, a.tolist(), cnt)
    start_step = round(ready_at_s / step)
    if start_step == 0:
        pool.advance(0, len(a), ready, deque())
    else:
        pool.advance(0, len(a), 0, deque([start_step] * ready))
    return float(np.count_nonzero(pool.waits() > slo))


@pytest.mark.parametrize(
    ("rate", "ready", "ready_at_s"),
    [(50.0, 6, 0.0), (50.0, 4, 0.0), (80.0, 6, 0.0), (50.0, 6, 30.0), (20.0, 3, 60.0)],
)
def test_batched_period_queue_matches_the_step_by_step_fluid_pool(rate: float, ready: int, ready_at_s: float) -> None:
    work, slo, duration = 0.1, 2.0, 300.0
    q = PeriodQueue("batched", work, slo)
    segs = [(ready_at_s, 0), (duration - ready_at_s, ready)] if ready_at_s else [(duration, ready)]
    got = q.serve(rate, segs)
    want = batched_misses(rate, work, slo, duration, ready, ready_at_s)
    assert got.requests == pytest.approx(rate * duration)
    # the closed form and the 0.05 s grid agree to a fraction of a percent of the requests
    assert abs(got.missed - want) <= 0.01 * got.requests + 2, (got.missed, want)


def test_a_queue_left_at_the_end_of_a_period_delays_the_next_one() -> None:
    q = PeriodQueue("batched", 0.1, 2.0)
    first = q.serve(100.0, [(60.0, 5)])  # 10 replica-s/s of work on 5 replicas: the backlog grows 5 per second
    assert first.queue_depth == pytest.approx(3000, abs=1)
    second = q.serve(10.0, [(60.0, 5)])  # light load, but 300 replica-s queued: 60 s to drain at 5
    assert second.missed > 0.8 * second.requests
    assert second.queue_depth == pytest.approx(600, abs=1)  # 300 - 4 x 60 replica-s left
    third = q.serve(10.0, [(60.0, 5)])  # 60 queued drain in 15 s; above 10 (2 s at 5) for the first 12.5 s
    assert third.missed == pytest.approx(10 * 12.5) and third.queue_depth == 0
    assert q.serve(10.0, [(60.0, 5)]).missed == 0


def test_exclusive_period_queue_waits_follow_erlang_c_like_the_one_request_pool() -> None:
    rng = np.random.default_rng(3)
    rate, work, servers, slo, n = 3.0, 1.0, 4, 0.5, 60_000
    t = np.cumsum(rng.exponential(1 / rate, n))
    w = rng.exponential(work, n)
    tr = request_trace("mmc", t, w, 1.0)
    pool = ExclusivePool(tr, servers)
    pool.advance(0, len(tr.count) + 10_000, servers, deque())
    simulated = float(np.mean(pool.waits() > slo))
    q = PeriodQueue("exclusive", work, slo)
    got = q.serve(rate, [(float(t[-1]), servers)])
    assert got.missed / got.requests == pytest.approx(erlang_c_tail(servers, rate * work, slo, work))
    assert got.missed / got.requests == pytest.approx(simulated, abs=0.02)
    assert PeriodQueue("batched", work, slo).serve(rate, [(1000.0, servers)]).missed == 0  # batching: no wait


def test_bad_queue_settings_are_clear_errors() -> None:
    with pytest.raises(ValidationError, match="queue"):
        PeriodQueue("fifo", 0.1, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="work_s"):
        PeriodQueue("batched", 0.0, 2.0)


class Recording(RatePolicy):
    """A replica policy that keeps every observation and holds a fixed fleet."""

    name = "recording"
    period_s = 900.0

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.seen: list[ReplicaSignals] = []

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        self.seen.append(signals)
        return ReplicaDecision(self.replicas, "fixed")


def _one_fleet_scenario(days: int = 2, **serving: object):  # type: ignore[no-untyped-def]
    sc = default_scenario(gpus=256, days=days, seed=5)
    spec = sc.serving[1].model_copy(update=serving)  # embed-small: one L40S per replica
    return sc.model_copy(update={"serving": [spec]})


def test_slo_attainment_comes_from_queue_waits_and_the_autoscaler_sees_the_queue() -> None:
    sc = _one_fleet_scenario()
    rps = sc.serving[0].base_rps
    per = sc.serving[0].target_rps_per_replica
    results = {}
    for replicas in (max(1, int(rps / per * 0.7)), int(rps / per * 2.5)):
        loop = ControlLoop.baseline(sc.seed)
        rec = Recording(replicas)
        loop.autoscaler = rec
        w = World(sc, loop)
        w.run()
        w.check_invariants()
        fr = w.fleets[0]
        results[replicas] = fr.served_req / fr.total_req
        obs = rec.seen
        assert len(obs) == len(fr.rps)  # every control tick
        assert obs[0].slo_misses == 0  # the first has served nothing
        assert all(o.peak_concurrency is None for o in obs)  # a batching fleet: no one-request gauge
        if replicas * per < rps:  # under-provisioned: the queue grows, requests miss, the autoscaler is told
            assert max(o.queue_depth for o in obs) > 0 and sum(o.slo_misses for o in obs) > 0
    low, high = sorted(results)
    assert results[low] < 0.5 < 0.99 < results[high]


def test_an_exclusive_fleet_reports_one_request_per_replica_to_the_autoscaler() -> None:
    sc = _one_fleet_scenario(days=1, queue="exclusive")
    loop = ControlLoop.baseline(sc.seed)
    rec = Recording(int(sc.serving[0].base_rps / sc.serving[0].target_rps_per_replica * 2))
    loop.autoscaler = rec
    World(sc, loop).run()
    obs = rec.seen
    assert obs and all(o.peak_concurrency is not None for o in obs)
    assert all(o.peak_concurrency >= o.concurrency - 1e-9 for o in obs if o.peak_concurrency is not None)


def test_the_gpufleet_loop_runs_the_slo_aware_replica_autoscaler() -> None:
    sc = _one_fleet_scenario(days=3)
    world, summary = simulate(sc)
    policies = world.loop.autoscaler.inner._by_fleet.values()  # type: ignore[attr-defined]
    assert policies and all(p.config.slo_s == sc.serving[0].slo_s for p in policies)
    assert all(p.config.max_concurrency is None for p in policies)  # declared by the scenario: batching
    assert 0.9 < summary["serving_slo_attainment"] <= 1.0
