"""Replica spread inside the binding planner (:class:`~gpufleet.control.binding.BindingPlanner`).

``spread`` is the loop's :class:`~gpufleet.control.placement.ReplicaSpread`, the object
``ControlLoop.replica_spread`` gives the simulator's scheduler (None: off). A single serving pod (``kind:
serving``, not in a gang) that is a replica of a fleet (:func:`serving_fleet`: its Deployment, read off its owner
ReplicaSet's name, or its other owner) prefers, among the fitting nodes of the capacity type the policy takes,
the first node in the policy's order holding fewer than the spread's cap of its fleet's replicas (those the
observation shows bound there, plus the ones the planner has in flight there). The fleet's size is its active
pods (bound, in flight, pending: the one being placed included), or its Deployment's ``spec.replicas`` when larger.
Bind reason ``replica_spread`` when that is not the node the policy alone would take. A preference only: when
every fitting node of that type is at the cap the pod goes where the policy puts it; it never waits for the spread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.control.observation import Observation, ObservedPod
from gpufleet.control.placement import ReplicaSpread
from gpufleet.control.preempting import TableHold
from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.schedule.scheduler import Infeasible, Placement, Scheduler
from gpufleet.schedule.table import NodeTable, PodRequest

# karpenter.sh/capacity-type -> the loop's tier (ReplicaSpread.tiers names tiers)
CAPACITY_TIER = {"reserved": Tier.RESERVED, "on-demand": Tier.ON_DEMAND, "spot": Tier.SPOT}
REASON_SPREAD = "replica_spread"


def serving_fleet(p: ObservedPod) -> str:
    """The serving fleet ``p`` is a replica of, ``""`` for none: a ``kind: serving`` pod owned by a ReplicaSet is a
    replica of its Deployment (the ReplicaSet is named ``<deployment>-<pod-template-hash>``, as
    ``control/replica_victims.deployment_replicas`` reads it, so the old and new ReplicaSets of a rollout are one
    fleet), one with another owner (a StatefulSet, say) of that owner; a pod without an owner is no fleet."""
    if p.kind != "serving" or not p.owner_name:
        return ""
    if p.owner_kind == "ReplicaSet":
        return f"{p.namespace}/Deployment/{p.owner_name.rpartition('-')[0] or p.owner_name}"
    return f"{p.namespace}/{p.owner_kind}/{p.owner_name}"


@dataclass(slots=True)
class _Fleet:
    replicas: int  # the fleet's size (the spread's cap is of it)
    crowd: dict[int, int]  # table node -> replicas of the fleet bound or in flight there


def spread_fleets(
    spread: ReplicaSpread | None,
    obs: Observation,
    singles: list[ObservedPod],
    table: NodeTable,
    held: Mapping[str, TableHold],
    doomed: Set[str],
) -> dict[str, _Fleet]:
    """The fleets of the serving ``singles`` about to be placed: their sizes and replicas per node (``held``: what
    the planner's pods hold in the table; ``doomed``: victims being evicted, counted nowhere)."""
    if spread is None:
        return {}
    keys = {k for p in singles if (k := serving_fleet(p))}
    if not keys:
        return {}
    out = {k: _Fleet(0, {}) for k in keys}
    index = {n: i for i, n in enumerate(table.names)}
    for p in obs.pods:
        if not p.active or p.gang:
            continue
        f = out.get(serving_fleet(p))
        if f is None:
            continue
        f.replicas += 1
        h = held.get(p.uid)
        node = h.node if h is not None else index.get(p.node) if p.node and p.uid not in doomed else None
        if node is not None:
            f.crowd[node] = f.crowd.get(node, 0) + 1
    for d in obs.deployments:  # what the Deployment asks for, when more than its pods so far
        f = out.get(f"{d.namespace}/Deployment/{d.name}")
        if f is not None:
            f.replicas = max(f.replicas, d.replicas)
    return out


def _spread_applies(spread: ReplicaSpread, tier_order: tuple[str, ...], mask: int) -> bool:
    """Whether the spread acts on the nodes of ``tier_order[mask]`` (-1: nodes of no listed capacity type)."""
    if not spread.tiers:
        return True
    tier = CAPACITY_TIER.get(tier_order[mask]) if 0 <= mask < len(tier_order) else None
    return tier is not None and spread.applies(TIER_RANK[tier])


def place_spread(
    sched: Scheduler,
    req: PodRequest,
    prefer: tuple[npt.NDArray[np.bool_], ...],
    fleet: _Fleet | None,
    spread: ReplicaSpread | None,
    tier_order: tuple[str, ...],
) -> Placement | Infeasible:
    """``sched.place(req, prefer)``; for a replica of ``fleet``, the replica spread is its redirect inside the
    capacity type the policy took: when the policy's node holds the cap, the policy is asked again without the
    nodes already offered, until a node under the cap (reason ``replica_spread``) or none is left (the policy's
    node stands)."""
    if fleet is None or spread is None:
        return sched.place(req, prefer)
    cap = spread.cap(fleet.replicas)

    def redirect(
        mask: int, cands: npt.NDArray[np.intp], node: int, slots: tuple[int, ...]
    ) -> tuple[int, tuple[int, ...], str] | None:
        if fleet.crowd.get(node, 0) < cap or not _spread_applies(spread, tier_order, mask):
            return None
        offered = {node: slots}

        def by_preference() -> Iterator[tuple[int]]:
            left, last = cands, node
            while True:  # at most one call per node at the cap (about 1 / share of them) before one under it
                left = left[left != last]
                if not left.size:
                    return
                last, got_slots = sched.policy.choose(sched.table, req, left, sched.rng)
                offered[last] = got_slots
                yield (last,)

        got = spread.pick(by_preference(), fleet.crowd, cap)
        return None if got is None else (got, offered[got], REASON_SPREAD)

    return sched.place(req, prefer, redirect)
