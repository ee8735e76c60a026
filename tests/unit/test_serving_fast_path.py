"""The replica port's fast path: the simulator's queue-growth observations between control ticks
(sim/serving.py) and each replica policy's ``react`` (HPA, KPA, gpufleet's, static, common practice)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.autoscale.baselines import HpaPolicy, KpaPolicy, StaticPolicy
from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.control.common_practice import PeakSizedReplicas
from gpufleet.control.loop import ControlLoop
from gpufleet.control.serving_headroom import SpareReplicas
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.kinds import RUNNING
from gpufleet.sim.queueing import PeriodQueue, combine
from gpufleet.sim.serving import METRICS_DELAY_S
from gpufleet.sim.world import World

FLEET = ServingScaling(min_replicas=1, max_replicas=100, target_rps_per_replica=10.0)


def _window(rps: float, ready: int, starting: int = 0, window_s: float = 45.0, queue: int = 0) -> ReplicaSignals:
    return ReplicaSignals(1000.0, ready, starting, window_s, rps, rps / 10.0, queue, rps / 10.0, slo_misses=0.0)


# ---------------------------------------------------------------- the queue served in parts


def test_a_period_served_in_two_parts_is_the_period_served_at_once() -> None:
    segs = [(100.0, 4), (300.0, 6), (500.0, 9)]
    whole = PeriodQueue("batched", 0.1, 2.0)
    w = whole.serve(70.0, segs)
    split = PeriodQueue("batched", 0.1, 2.0)
    a = split.serve(70.0, [(45.0, 4)])  # the observation 45 s in
    b = split.serve(70.0, [(55.0, 4), (300.0, 6), (500.0, 9)])
    got = combine([a, b])
    assert a.queue_depth > 0 and a.duration_s == 45.0  # 7 replicas of work on 4: the queue grows
    assert got.requests == pytest.approx(w.requests)
    assert got.missed == pytest.approx(w.missed)
    assert got.concurrency == pytest.approx(w.concurrency)
    assert got.load_replicas == pytest.approx(w.load_replicas)
    assert got.queue_depth == w.queue_depth and got.duration_s == pytest.approx(900.0)
    assert combine([w]) is w


# ---------------------------------------------------------------- the policies' fast paths


def test_hpa_reacts_on_the_short_window_with_its_scale_up_limit_and_keeps_no_state() -> None:
    hpa = HpaPolicy(target_utilization=0.7)
    d = hpa.react(_window(200.0, ready=4), FLEET)  # 20 replicas of load on 4: rec ceil(20 / 0.7) = 29
    assert d is not None and d.reason == "utilization_sync"
    # 45 s = 3 syncs of 15 s, each at most max(2x, +4): 4 -> 8 -> 16 -> 32, capped at the recommendation
    assert d.desired == 29
    one_sync = hpa.react(_window(200.0, ready=4, window_s=15.0), FLEET)
    assert one_sync is not None and one_sync.desired == 8
    assert hpa.react(_window(30.0, ready=4), FLEET) is None  # 3 replicas of load on 4 at 70%: within tolerance
    assert hpa.react(_window(10.0, ready=8), FLEET) is None  # never scales down here
    assert not hpa._recs and not hpa._last_s  # decide's windows untouched


def test_kpa_panics_when_the_window_asks_for_twice_the_ready_pods() -> None:
    kpa = KpaPolicy(target_rps_per_replica=10.0)
    d = kpa.react(_window(200.0, ready=4), FLEET)
    assert d is not None and (d.desired, d.reason) == (20, "panic")
    d = kpa.react(_window(60.0, ready=4), FLEET)
    assert d is not None and (d.desired, d.reason) == (6, "stable")
    assert kpa.react(_window(60.0, ready=4, starting=2), FLEET) is None


def test_static_and_common_practice_fleets_do_not_react() -> None:
    assert StaticPolicy(3).react(_window(500.0, ready=3), FLEET) is None
    cp = PeakSizedReplicas(900.0)
    cp.decide(_window(50.0, ready=0), FLEET)
    assert cp.react(_window(500.0, ready=6), FLEET) is None


def _gpufleet() -> PredictiveReplicas:
    return PredictiveReplicas(900.0, slo_s=2.0)


def test_gpufleet_reacts_to_the_load_plus_the_queue_and_never_scales_down() -> None:
    p = _gpufleet()
    p.decide(_window(50.0, ready=0, window_s=900.0), FLEET)
    hot = 10.0 * 0.8 * 1.2  # rps one replica carries at the hot utilization decide sizes for
    d = p.react(_window(100.0, ready=6), FLEET)
    assert d is not None and d.reason == "queue_growth" and d.desired >= 100.0 / hot
    queued = p.react(_window(100.0, ready=6, queue=3000), FLEET)
    assert queued is not None and queued.desired > d.desired  # the backlog asks for drain capacity
    assert p.react(_window(100.0, ready=6, starting=8), FLEET) is None  # the fleet on its way covers it
    assert p.react(_window(20.0, ready=10), FLEET) is None  # less load: nothing (scale-down waits for decide)


def test_gpufleet_fast_path_leaves_the_per_period_decisions_unchanged() -> None:
    """``decide`` sees the same history with or without ``react`` calls between its periods."""
    plain, reacting = SpareReplicas(_gpufleet(), 900.0), SpareReplicas(_gpufleet(), 900.0)
    for sp in (plain, reacting):
        sp.declare_fleet(FLEET, gpus_per_replica=1, slo_s=2.0, max_concurrency=None)
    ready = 0
    reacted = 0
    for k in range(400):
        rps = 80.0 if k % 96 else 160.0  # a daily step
        s = replace(_window(rps, ready=ready, window_s=900.0), now_s=k * 900.0)
        a, b = plain.decide(s, FLEET), reacting.decide(s, FLEET)
        assert (a.desired, a.reason) == (b.desired, b.reason)
        ready = a.desired
        r = reacting.react(replace(_window(rps * 1.5, ready=ready), now_s=k * 900.0 + 45.0), FLEET)
        reacted += r is not None
    assert reacted > 0


def test_the_spare_rides_on_top_of_the_inner_reaction() -> None:
    class Inner(RatePolicy):
        name, period_s = "inner", 900.0

        def __init__(self) -> None:
            self.seen: list[ReplicaSignals] = []

        def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
            return ReplicaDecision(1, "x")

        def react(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision | None:
            self.seen.append(signals)
            return ReplicaDecision(10, "queue_growth")

    inner = Inner()
    sp = SpareReplicas(inner, 900.0, spare=1)
    d = sp.react(_window(100.0, ready=5, starting=1), FLEET)
    assert d is not None and d.desired == 11 and (inner.seen[0].ready, inner.seen[0].starting) == (5, 0)
    assert sp.react(_window(100.0, ready=11), FLEET) is None


# ---------------------------------------------------------------- the world


class Fixed(RatePolicy):
    """Holds ``replicas`` every period; the fast path (if ``fast``) asks for twice the observed load."""

    name = "fixed"
    period_s = 900.0

    def __init__(self, replicas: int, fast: bool) -> None:
        self.replicas = replicas
        self.fast = fast
        self.decided: list[ReplicaSignals] = []
        self.reacted: list[ReplicaSignals] = []

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        self.decided.append(signals)
        return ReplicaDecision(self.replicas, "fixed")

    def react(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision | None:
        self.reacted.append(signals)
        want = int(2 * signals.load_replicas) + 1
        return ReplicaDecision(want, "fast") if self.fast and want > signals.total else None


def _one_fleet(days: int = 2):  # type: ignore[no-untyped-def]
    sc = default_scenario(gpus=256, days=days, seed=5)
    spec = sc.serving[1]  # embed-small: one L40S per replica, 60 s cold start
    return sc.model_copy(update={"serving": [spec], "failures": sc.failures.model_copy(update={"node_mtbf_days": 1e9})})


def _run(replicas: int, fast: bool, delay: int | None = METRICS_DELAY_S, *, warm: bool = True) -> tuple[World, Fixed]:
    sc = _one_fleet().model_copy(update={"warm_start": warm})
    loop = ControlLoop.baseline(sc.seed)
    pol = Fixed(replicas, fast)
    loop.autoscaler = pol
    w = World(sc, loop)
    w.serving.metrics_delay_s = delay
    w.run()
    w.check_invariants()
    return w, pol


def test_an_under_sized_fleet_is_observed_once_its_metrics_show_the_queue_and_reacting_serves_more() -> None:
    sc = _one_fleet()
    short = max(1, int(sc.serving[0].base_rps / sc.serving[0].target_rps_per_replica * 0.8))
    w_off, _ = _run(short, fast=True, delay=None)
    w_static, static = _run(short, fast=False)
    w_fast, fast = _run(short, fast=True)
    att = {n: w.fleets[0].served_req / w.fleets[0].total_req for n, w in (("off", w_off), ("static", w_static))}
    att["fast"] = w_fast.fleets[0].served_req / w_fast.fleets[0].total_req
    assert w_off.serving.observations == 0
    # a policy that does not react changes nothing: the same requests served as with no observation at all
    assert att["static"] == pytest.approx(att["off"], abs=1e-12)
    assert w_static.serving.observations > 0 and w_static.serving.reactions == 0
    assert att["fast"] > att["static"] + 0.1
    assert w_fast.serving.reactions > 0
    first = static.reacted[0]
    assert first.period_s == METRICS_DELAY_S and first.now_s % 900 == METRICS_DELAY_S
    assert first.queue_depth > 0 and first.load_replicas > first.ready
    # decide is called once per tick and sees whole periods (the parts before an observation combined)
    for pol, w in ((static, w_static), (fast, w_fast)):
        assert len(pol.decided) == len(w.fleets[0].rps)
        assert all(s.period_s == 900.0 for s in pol.decided)
    total = sum(s.arrival_rps * s.period_s for s in static.decided[1:])
    assert total == pytest.approx(w_static.fleets[0].total_req)
    # one observation per growth (here each period start: no failures), the only extra events of a static fleet
    assert w_static.q.processed - w_off.q.processed == w_static.serving.observations <= len(w_static.fleets[0].rps)


def test_a_well_sized_fleet_costs_no_observation_after_its_cold_start() -> None:
    sc = _one_fleet()
    size = int(sc.serving[0].base_rps / sc.serving[0].target_rps_per_replica * 3)
    cold, pol = _run(size, fast=True, warm=False)
    assert cold.serving.observations == 1  # t = 0 without a warm start: the fleet waits for nodes and a cold start
    assert pol.reacted[0].now_s == METRICS_DELAY_S and pol.reacted[0].ready == 0
    warm, pol = _run(size, fast=True)
    # day 0's fleet is up: the tick at t = 0 looked before its replicas' ready events (at the same second), so one
    # observation finds the whole fleet ready and changes nothing
    assert warm.serving.observations == 1 and warm.serving.reactions == 0
    assert pol.reacted[0].now_s == METRICS_DELAY_S and pol.reacted[0].ready == size


def test_a_warm_start_has_day_0_fleet_up_at_time_0_and_later_launches_pay_their_start() -> None:
    sc = _one_fleet()
    need = int(sc.serving[0].base_rps / sc.serving[0].target_rps_per_replica) + 1
    warm, _ = _run(need, fast=False)
    cold, _ = _run(need, fast=False, warm=False)
    fr_w, fr_c = warm.fleets[0], cold.fleets[0]
    assert fr_w.total_req == fr_c.total_req > 0  # the same traffic
    assert fr_w.served_req > fr_c.served_req  # the cold start's first minutes miss requests; the warm one's do not
    assert warm.provisioner.start_delay_s(600, 0) == 0 and warm.provisioner.start_delay_s(600, 1) == 600
    assert cold.provisioner.start_delay_s(600, 0) == 600


def test_a_replica_that_stops_serving_under_load_raises_an_observation() -> None:
    sc = _one_fleet()
    need = sc.serving[0].base_rps / sc.serving[0].target_rps_per_replica
    loop = ControlLoop.baseline(sc.seed)
    pol = Fixed(int(need * 1.6) + 1, fast=True)
    loop.autoscaler = pol
    w = World(sc, loop)
    w.run(until_s=3 * 3600 + 100)
    fr = w.fleets[0]
    assert fr.observe_at < 0 and fr.ready == len(fr.pods)
    now = w.q.now_s
    k = now // 900
    load = float(fr.rps[k]) * fr.queue.work_s
    drop = fr.ready - int(load) + 1  # the node failure that leaves the ready fleet short of the arrivals
    running = [p for p in fr.pods if w.pods.state[p] == RUNNING]
    for pod in running[:drop]:
        w.scheduling.interrupt(pod, now)
    assert fr.observe_at == now + METRICS_DELAY_S
    n = len(pol.reacted)
    w.run(until_s=now + METRICS_DELAY_S)
    assert len(pol.reacted) == n + 1 and pol.reacted[-1].ready < load
    assert len(fr.pods) > fr.ready  # replacements asked for within the period
    w.run()
    w.check_invariants()
