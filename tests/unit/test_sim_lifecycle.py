"""Every edge of the simulator's node and pod transition tables, allowed and refused."""

from __future__ import annotations

import pytest

from gpufleet.domain.catalog import default_pools
from gpufleet.domain.errors import InvalidTransition
from gpufleet.sim.fleet import Fleet
from gpufleet.sim.lifecycle import NODE_TRANSITIONS, POD_TRANSITIONS, NodeState, PodState, node_gate, pod_gate

NODE_EDGES = [(a, b) for a in NodeState for b in NodeState]
POD_EDGES = [(a, b) for a in PodState for b in PodState]


@pytest.mark.parametrize(("source", "target"), NODE_EDGES, ids=[f"{a.name}->{b.name}" for a, b in NODE_EDGES])
def test_node_gate_allows_exactly_the_table(source: NodeState, target: NodeState) -> None:
    if target in NODE_TRANSITIONS[source]:
        node_gate(7, source, target)
    else:
        with pytest.raises(InvalidTransition, match=f"node 7: transition {source.name} -> {target.name}"):
            node_gate(7, source, target)


@pytest.mark.parametrize(("source", "target"), POD_EDGES, ids=[f"{a.name}->{b.name}" for a, b in POD_EDGES])
def test_pod_gate_allows_exactly_the_table(source: PodState, target: PodState) -> None:
    if target in POD_TRANSITIONS[source]:
        pod_gate(3, source, target)
    else:
        with pytest.raises(InvalidTransition, match=f"pod 3: transition {source.name} -> {target.name}"):
            pod_gate(3, source, target)


def _fleet_with_node(state: NodeState) -> tuple[Fleet, int]:
    f = Fleet(["h100_80gb"], [8])
    for pool in default_pools("h100_80gb", "us-east-1"):
        f.add_pool(pool, None)
    node = f.launch(1, 0, up=False)
    f.n_state[node] = state
    return f, node


# the fleet's three state-changing methods and the target each one sets
FLEET_MOVES = {NodeState.UP: "node_up", NodeState.DOWN: "node_down", NodeState.GONE: "terminate"}


@pytest.mark.parametrize(
    ("source", "target"),
    [(a, b) for a in NodeState for b in FLEET_MOVES],
    ids=[f"{a.name}->{b.name}" for a in NodeState for b in FLEET_MOVES],
)
def test_the_fleet_changes_node_state_only_through_the_gate(source: NodeState, target: NodeState) -> None:
    f, node = _fleet_with_node(source)
    if source == NodeState.UP:  # an UP node is in the free-GPU index, as the fleet keeps it
        pr = f.pools[f.n_pool[node]]
        f.index.add(node, pr.sku_idx, pr.tier_rank, f.n_free[node])
    method = getattr(f, FLEET_MOVES[target])
    args = (node, 10) if target in (NodeState.UP, NodeState.GONE) else (node,)
    if target in NODE_TRANSITIONS[source]:
        method(*args)
        assert f.n_state[node] == target
    else:
        with pytest.raises(InvalidTransition):
            method(*args)
        assert f.n_state[node] == source
