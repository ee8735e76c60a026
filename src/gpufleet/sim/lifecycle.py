"""Node and pod lifecycles of the simulated world: ONE transition table and ONE gate each.

Every node state change goes through :func:`node_gate` (called by :class:`~gpufleet.sim.fleet.Fleet`), every
pod state change through :func:`pod_gate` (called by :meth:`~gpufleet.sim.pods.PodTable.set_state`). A test walks every edge of
both tables, allowed and refused (tests/unit/test_sim_lifecycle.py), as tests/unit/test_reservation_transitions.py
does for reservations.
"""

from __future__ import annotations

from enum import IntEnum

from gpufleet.domain.errors import InvalidTransition


class NodeState(IntEnum):
    PROVISIONING = 0  # launched, billed, not yet usable
    UP = 1
    DOWN = 2  # failed, billed, being repaired
    GONE = 3  # terminated or taken back by the provider


class PodState(IntEnum):
    NEW = 0  # not arrived yet
    QUEUED = 1  # admitted by quota, waiting for capacity (counted as pending demand)
    RUNNING = 2
    DONE = 3
    REMOVED = 4  # a serving replica scaled down or lost
    PARKED = 5  # waiting for its team's quota (not pending demand: no node is launched for it)


N = NodeState
NODE_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    N.PROVISIONING: frozenset({N.UP}),  # the node started
    N.UP: frozenset({N.DOWN, N.GONE}),  # failed (or preempted: down, then gone); scaled down
    N.DOWN: frozenset({N.UP, N.GONE}),  # repaired; a preempted spot node is taken back
    N.GONE: frozenset(),
}

P = PodState
POD_TRANSITIONS: dict[PodState, frozenset[PodState]] = {
    P.NEW: frozenset({P.QUEUED, P.RUNNING, P.PARKED}),  # arrived: placed, queued, or parked by quota
    P.QUEUED: frozenset({P.RUNNING, P.REMOVED, P.PARKED}),  # placed; replica dropped; quota reclaimed
    P.RUNNING: frozenset({P.QUEUED, P.PARKED, P.DONE, P.REMOVED}),  # interrupted; ended; replica dropped
    P.PARKED: frozenset({P.QUEUED, P.RUNNING, P.REMOVED}),  # admitted; replica dropped
    P.DONE: frozenset(),
    P.REMOVED: frozenset(),
}

# indexed by the int value, for the event loop's hot path
_NODE_NEXT = tuple(frozenset(int(t) for t in NODE_TRANSITIONS[s]) for s in NodeState)
POD_NEXT = tuple(frozenset(int(t) for t in POD_TRANSITIONS[s]) for s in PodState)


def node_gate(node: int, current: int, target: int) -> None:
    """Raise :class:`InvalidTransition` unless the node table allows ``current -> target``."""
    if target not in _NODE_NEXT[current]:
        raise InvalidTransition(f"node {node}", NodeState(current).name, NodeState(target).name)


def pod_gate(pod: int, current: int, target: int) -> None:
    """Raise :class:`InvalidTransition` unless the pod table allows ``current -> target``."""
    if target not in POD_NEXT[current]:
        raise InvalidTransition(f"pod {pod}", PodState(current).name, PodState(target).name)
