"""The world's rank keys (ServingFleets.replica_keys) are what the cost-aware rule ranks of the replica views."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.replica_victims import (
    ReplicaView,
    VictimChoice,
    _rank_keys,
    dearest_first,
    dearest_first_keys,
)

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only


def _plain_dearest_first(replicas: list[ReplicaView], k: int) -> list[VictimChoice]:
    """The rule as session 15 wrote it (not-ready newest first, then the k largest keys)."""
    n = len(replicas)
    keys = _rank_keys(replicas)
    out = [VictimChoice(i, "victim_not_ready") for i in [i for i in range(n - 1, -1, -1) if not replicas[i].ready][:k]]
    m = k - len(out)
    if m <= 0:
        return out
    newest = {key[2] for key in keys[-m:]}
    for _s, alone, j in sorted(keys, reverse=True)[:m]:
        reason = "victim_newest" if j in newest else "victim_dearest_empties_node" if alone else "victim_dearest"
        out.append(VictimChoice(j, reason))
    return out


_view = st.builds(
    ReplicaView,
    st.booleans(),
    st.integers(-1, 5),
    st.sampled_from([0.0, 2.95, 6.88, 1.2]),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_view, min_size=0, max_size=30), st.data())
def test_dearest_first_keys_is_the_rule(views: list[ReplicaView], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(views)))
    want = _plain_dearest_first(views, k)
    assert dearest_first(views, k) == want
    not_ready = [i for i, v in enumerate(views) if not v.ready]
    assert dearest_first_keys(_rank_keys(views), not_ready, k) == want


def test_world_keys_are_the_views_keys() -> None:
    """Every scale-down of a short gpufleet run: the keys the world writes equal the rule's keys of its views."""
    from gpufleet.sim.builtin import default_scenario
    from gpufleet.sim.run import gpufleet_loop
    from gpufleet.sim.world import World

    sc = default_scenario(gpus=512, days=6, seed=12)
    w = World(sc, gpufleet_loop(sc, 12))
    serving = w.serving
    plain = serving.replica_keys
    seen = {"calls": 0, "not_ready": 0}

    def checked(fr):  # type: ignore[no-untyped-def]
        keys, not_ready = plain(fr)
        views = serving.replica_views(fr)
        assert keys == _rank_keys(views)
        assert not_ready == [i for i, v in enumerate(views) if not v.ready]
        seen["calls"] += 1
        seen["not_ready"] += bool(not_ready)
        return keys, not_ready

    serving.replica_keys = checked  # type: ignore[method-assign]
    w.run()
    assert seen["calls"] > 20
