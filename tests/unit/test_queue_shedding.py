"""Admission control at the serving gateway (sim/queueing.PeriodQueue ``shed_wait_s``): the closed form against a
step-by-step fluid reference, conservation of requests, and the unbounded FIFO when no limit is given."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.sim.queueing import PeriodQueue
from gpufleet.sim.world import World

from .test_sim_queueing import Recording, _one_fleet_scenario

Segments = list[tuple[float, int]]


def fluid_reference(
    rate: float, work: float, slo: float, limit: float, q0: float, segments: Segments, n: int = 20_000
) -> tuple[float, float, float]:
    """(late, shed, final backlog) by small steps: each step's arrivals see the backlog at its start; they are
    shed with no ready replica or a backlog above ``ready * limit``, else queued (late above ``ready * slo``)."""
    total = sum(d for d, _ in segments)
    dt = total / n
    q, late, shed = q0, 0.0, 0.0
    for d, c in segments:
        steps = max(1, round(d / dt))
        h = d / steps
        for _ in range(steps):
            arr = rate * h
            if c <= 0 or q > c * limit + 1e-12:
                shed += arr
                q = max(0.0, q - c * h)
                continue
            if q > c * slo + 1e-12:
                late += arr
            q = max(0.0, q + arr * work - c * h)
    return late, shed, q


segments_st = st.lists(
    st.tuples(st.floats(1.0, 400.0), st.integers(0, 6)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.0, 20.0),
    work=st.floats(0.1, 2.0),
    slo=st.floats(0.5, 30.0),
    limit_x=st.sampled_from([0.5, 1.0, 2.0]),
    q0=st.floats(0.0, 80.0),
    segments=segments_st,
)
def test_closed_form_shedding_matches_a_step_by_step_fluid_queue(
    rate: float, work: float, slo: float, limit_x: float, q0: float, segments: Segments
) -> None:
    limit = limit_x * slo
    pq = PeriodQueue("batched", work, slo, shed_wait_s=limit)
    pq.backlog = q0
    got = pq.serve(rate, segments)
    late, shed, q = fluid_reference(rate, work, slo, limit, q0, segments)
    total = sum(d for d, _ in segments)
    requests = rate * total
    # the reference errs by about one step's arrivals per boundary crossing (cap, SLO threshold, segment)
    tol = 1e-6 + 1e-4 * requests + 8 * rate * total / 20_000 * (len(segments) + 2)
    assert math.isclose(got.requests, requests, rel_tol=1e-9, abs_tol=1e-9)
    assert abs(got.shed - shed) <= tol
    assert abs((got.missed - got.shed) - late) <= tol
    assert abs(pq.backlog - q) <= 1e-6 + 1e-4 * max(q, q0) + 8 * (rate * work + 6) * total / 20_000 * (
        len(segments) + 2
    )


@settings(max_examples=80, deadline=None)
@given(
    model=st.sampled_from(["batched", "exclusive"]),
    rate=st.floats(0.0, 50.0),
    work=st.floats(0.05, 3.0),
    slo=st.floats(0.0, 30.0),
    limit_x=st.floats(0.0, 3.0),
    q0=st.floats(0.0, 200.0),
    segments=segments_st,
)
def test_shed_served_and_late_add_up_to_the_arrivals_and_the_cap_holds(
    model: str, rate: float, work: float, slo: float, limit_x: float, q0: float, segments: Segments
) -> None:
    pq = PeriodQueue(model, work, slo, shed_wait_s=limit_x * slo)  # type: ignore[arg-type]
    pq.backlog = q0
    got = pq.serve(rate, segments)
    served = got.requests - got.missed
    late = got.missed - got.shed
    assert got.shed >= -1e-9 and late >= -1e-9 and served >= -1e-9
    assert math.isclose(got.shed + late + served, rate * sum(d for d, _ in segments), rel_tol=1e-9, abs_tol=1e-9)
    # the cap holds at the end once the last segment had time to drain what was above it
    pq2 = PeriodQueue(model, work, slo, shed_wait_s=limit_x * slo)  # type: ignore[arg-type]
    pq2.backlog = q0
    first = pq2.serve(rate, segments[:-1]) if len(segments) > 1 else None
    before = pq2.backlog
    last = pq2.serve(rate, segments[-1:])
    assert math.isclose(pq2.backlog, pq.backlog, rel_tol=1e-9, abs_tol=1e-9)  # two calls serve as one
    assert math.isclose((first.shed if first else 0.0) + last.shed, got.shed, rel_tol=1e-9, abs_tol=1e-9)
    d, c = segments[-1]
    cap = c * limit_x * slo
    if c > 0 and d >= (before - cap) / c:
        assert pq.backlog <= cap + 1e-9 * (1 + before)


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(["batched", "exclusive"]),
    rate=st.floats(0.0, 50.0),
    work=st.floats(0.05, 3.0),
    slo=st.floats(0.0, 30.0),
    q0=st.floats(0.0, 200.0),
    segments=segments_st,
)
def test_no_limit_sheds_nothing(
    model: str, rate: float, work: float, slo: float, q0: float, segments: Segments
) -> None:
    pq = PeriodQueue(model, work, slo)  # type: ignore[arg-type]
    pq.backlog = q0
    got = pq.serve(rate, segments)
    assert got.shed == 0.0


def test_an_overload_sheds_the_excess_instead_of_making_every_request_late() -> None:
    # 2% over capacity for 30 minutes: the FIFO makes every request late after the backlog passes the SLO; the
    # gateway sheds about the excess 2% and serves the rest within the SLO
    work, slo, ready, rate = 1.0, 2.0, 50, 51.0
    fifo = PeriodQueue("batched", work, slo).serve(rate, [(1800.0, ready)])
    shed = PeriodQueue("batched", work, slo, shed_wait_s=slo).serve(rate, [(1800.0, ready)])
    assert fifo.shed == 0.0 and fifo.missed > 0.9 * fifo.requests
    assert shed.missed == shed.shed and shed.shed < 0.03 * shed.requests


def test_only_the_gpufleet_loop_limits_the_gateway_queue() -> None:
    assert ControlLoop.gpufleet(1).queue_limit_slo == 1.0
    assert ControlLoop.common_practice(1).queue_limit_slo is None
    assert ControlLoop.baseline(1).queue_limit_slo is None
    assert ControlLoop.gpufleet(1).queue_wait_limit_s(2.0) == 2.0
    assert ControlLoop.baseline(1).queue_wait_limit_s(2.0) is None


def test_the_world_applies_the_limit_and_the_autoscaler_still_sees_the_full_demand() -> None:
    sc = _one_fleet_scenario(days=1)
    rps = sc.serving[0].base_rps
    per = sc.serving[0].target_rps_per_replica
    replicas = max(1, int(rps / per * 0.7))  # under-provisioned
    out = {}
    for limit in (None, 1.0):
        loop = ControlLoop.baseline(sc.seed)
        loop.queue_limit_slo = limit
        rec = Recording(replicas)
        loop.autoscaler = rec
        w = World(sc, loop)
        w.run()
        fr = w.fleets[0]
        assert fr.queue.shed_wait_s == (None if limit is None else sc.serving[0].slo_s)
        out[limit] = (fr, rec.seen)
    (f0, s0), (f1, s1) = out[None], out[1.0]
    assert f0.shed_req == 0.0 and f1.shed_req > 0.0
    assert math.isclose(f0.total_req, f1.total_req, rel_tol=1e-9)
    # the same arrivals and load are reported; the shed requests count as SLO misses
    assert [o.arrival_rps for o in s0] == [o.arrival_rps for o in s1]
    assert [o.load_replicas for o in s0] == [o.load_replicas for o in s1]
    assert sum(o.slo_misses or 0.0 for o in s1) >= f1.shed_req - 1e-6


def test_the_fast_path_still_fires_and_reacts_when_the_gateway_sheds() -> None:
    from .test_serving_fast_path import Fixed, _one_fleet

    sc = _one_fleet()
    short = max(1, int(sc.serving[0].base_rps / sc.serving[0].target_rps_per_replica * 0.8))
    seen = {}
    for limit in (None, 1.0):
        loop = ControlLoop.baseline(sc.seed)
        loop.queue_limit_slo = limit
        pol = Fixed(short, fast=True)
        loop.autoscaler = pol
        w = World(sc, loop)
        w.run()
        w.check_invariants()
        seen[limit] = (w, pol)
    (w0, p0), (w1, p1) = seen[None], seen[1.0]
    assert w1.fleets[0].shed_req > 0
    # the same growths are observed and reacted to: the trigger is the arriving work above the ready replicas
    assert w1.serving.observations == w0.serving.observations > 0
    assert w1.serving.reactions == w0.serving.reactions > 0
    assert [s.load_replicas for s in p1.reacted] == [s.load_replicas for s in p0.reacted]
