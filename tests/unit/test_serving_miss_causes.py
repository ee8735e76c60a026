"""sim/serving.py's miss accounting: every missed request is attributed to exactly one cause."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.kinds import QUEUED, RUNNING
from gpufleet.sim.run import simulate
from gpufleet.sim.serving import MISS_CAUSES, FleetRuntime, ServingFleets

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(20, 10_000), days=st.integers(3, 5), loop=st.sampled_from(["baseline", "gpufleet"]))
def test_misses_by_cause_add_up_to_the_fleets_missed_requests(seed: int, days: int, loop: str) -> None:
    sc = default_scenario(gpus=128, days=days, seed=seed)
    w, summary = simulate(sc, seed=seed, loop=getattr(ControlLoop, loop)(seed))
    total = 0.0
    for fr in w.fleets:
        assert set(fr.misses_by_cause) <= set(MISS_CAUSES)
        assert all(v > 0 for v in fr.misses_by_cause.values())
        missed = fr.total_req - fr.served_req
        assert math.isclose(sum(fr.misses_by_cause.values()), missed, rel_tol=1e-9, abs_tol=1e-6)
        total += missed
    assert math.isclose(sum(summary["serving_misses_by_cause"].values()), total, rel_tol=1e-6, abs_tol=0.5)


def test_a_baseline_fleet_short_at_a_step_has_its_misses_attributed() -> None:
    """Seed 23's baseline loop misses embed-small requests in the first days: cold starts and a fleet all up."""
    w, summary = simulate(default_scenario(gpus=128, days=5, seed=23), seed=23, loop=ControlLoop.baseline(23))
    embed = next(fr for fr in w.fleets if fr.spec.name == "embed-small")
    assert embed.total_req - embed.served_req > 1000
    assert set(embed.misses_by_cause) == {"cold_start", "all_up"}
    assert summary["serving"]["embed-small"]["misses_by_cause"] == {
        k: round(v, 1) for k, v in sorted(embed.misses_by_cause.items())
    }


def _attribute(
    pods: list[tuple[int, bool, int, int]], *, last_loss_s: int = -(10**9), last_down_s: int = -(10**9)
) -> str:
    """The cause ``account_misses`` gives a window [9000, 9900) of a fleet whose replicas are (state, ready, placed
    at, asked at); the fleet's replicas cold-start in 60 s, the period is 900 s."""
    table = SimpleNamespace(
        state=[p[0] for p in pods], ready=[p[1] for p in pods], start=[p[2] for p in pods], arrival=[p[3] for p in pods]
    )
    fr = FleetRuntime(SimpleNamespace(cold_start_s=60), None, 0, None, None)  # type: ignore[arg-type]
    fr.pods = list(range(len(pods)))
    fr.last_loss_s, fr.last_scale_down_s = last_loss_s, last_down_s
    ServingFleets.account_misses(SimpleNamespace(pods=table, period_s=900), fr, 9000, 9900, 5.0)  # type: ignore[arg-type]
    assert sum(fr.misses_by_cause.values()) == 5.0
    (cause,) = fr.misses_by_cause
    return cause


def test_each_cause_is_given_where_it_holds_first() -> None:
    up = (RUNNING, True, 0, 0)  # ready long before the window
    assert _attribute([up, (QUEUED, False, 8000, 8000)]) == "no_capacity"  # waiting for a node
    assert _attribute([up, (RUNNING, False, 9500, 8000)]) == "no_capacity"  # placed 1,500 s after it was asked for
    assert _attribute([up, (RUNNING, True, 8990, 8000)], last_loss_s=9100) == "no_capacity"  # ready at 9,050, late
    assert _attribute([up, (RUNNING, False, 9500, 9500)], last_loss_s=8500) == "replica_lost"
    assert _attribute([up, (RUNNING, False, 9500, 9500)], last_down_s=8000) == "cold_start_after_scale_down"
    assert _attribute([up, (RUNNING, False, 9500, 9500)], last_down_s=7000) == "cold_start"
    assert _attribute([up, up], last_down_s=9000) == "all_up_after_scale_down"
    assert _attribute([up, up], last_down_s=8100) == "all_up"
