"""FreeingEstimates.expected_free_times with each node's runs kept per node change (_node_runs) gives the times
the plain per-pod reading gives, at every query of a run."""

from __future__ import annotations

import pytest

from gpufleet.sim.freeing import FreeingEstimates
from gpufleet.sim.kinds import RUNNING
from gpufleet.sim.lifecycle import NodeState

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only


def _plain(fe: FreeingEstimates, s: int, now: int, within_s: int, want: int, tiers: tuple[int, ...]) -> list[int]:
    """The reading before the memo (session 15's loop), over the same active nodes."""
    f, p = fe.fleet, fe.pods
    per = fe.per_node[s]
    limit = now + within_s
    st = fe._state(s, within_s)
    times: list[int] = []
    for node in st.active:
        free = f.n_free[node]
        if free >= want or f.n_state[node] != NodeState.UP or f.pools[f.n_pool[node]].tier_rank not in tiers:
            continue
        ends: list[tuple[int, int]] = []
        for pod in f.n_pods[node]:
            if p.serving[pod] >= 0 or p.state[pod] != RUNNING:
                break
            left = p.start[pod] + p.remaining[pod] - now
            eta = now + int(left * fe.eta_mult(pod)) if left > 0 else now
            if eta > limit:
                break
            ends.append((eta, min(p.gpus[pod], per)))
        else:
            ends.sort()
            got = free
            for eta, gpus in ends:
                got += gpus
                if got >= want:
                    times.append(max(eta, now))
                    break
    times.sort()
    return times


def test_kept_runs_give_the_plain_times() -> None:
    from gpufleet.sim.builtin import default_scenario
    from gpufleet.sim.run import gpufleet_loop
    from gpufleet.sim.world import World

    sc = default_scenario(gpus=512, days=8, seed=12)
    w = World(sc, gpufleet_loop(sc, 12))
    fe = w.freeing
    fast = fe.expected_free_times
    seen = {"calls": 0, "times": 0}

    def checked(s: int, now: int, within_s: int, want: int, tiers: tuple[int, ...]) -> list[int]:
        got = fast(s, now, within_s, want, tiers)
        assert got == _plain(fe, s, now, within_s, want, tiers)
        seen["calls"] += 1
        seen["times"] += len(got)
        return got

    fe.expected_free_times = checked  # type: ignore[method-assign]
    w.run()
    assert seen["calls"] > 50 and seen["times"] > 0
