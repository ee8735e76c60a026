"""sim/serving.py's miss accounting: every missed request is attributed to exactly one cause."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.run import simulate
from gpufleet.sim.serving import MISS_CAUSES


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
