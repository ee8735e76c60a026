"""Which replica of a serving fleet to stop when the fleet scales down: a pure decision with a reason code.

Kubernetes' ReplicaSet controller, asked to remove replicas, stops a replica that is not ready yet first, then the
newest (``controller.ReplicaSetController``'s default ranking, without a ``pod-deletion-cost``): that order costs
nothing to compute and ignores what each replica's node costs. :func:`newest_first` is that rule; the baseline
and common-practice loops keep it, so their figures do not move.

gpufleet's rule, :func:`dearest_first`, stops a replica that is not ready yet first too (it serves nothing, and
stopping it loses no warm replica), then the ready replica whose removal saves the most: the one on the dearest
node per GPU-hour. A node held under a reservation is paid whether used or not, so a replica there saves nothing
(price 0); on-demand ($6.88/GPU-h for an H100) goes before secondary ($2.95) before reserved. Among equally dear
replicas the one alone on its node(s) goes first, so the node empties and the node scaler can stop it; then the
newest (Kubernetes' own tie-break). Placement takes the cheapest running room first
(control/placement.running_tier_order): together the two keep serving on the cheap room and let the dear
on-demand nodes empty.

The world describes each replica as a :class:`ReplicaView` (oldest first, the fleet's order) and applies the
choice; it never decides. In Kubernetes the same choice is expressed by the
``controller.kubernetes.io/pod-deletion-cost`` annotation (the ReplicaSet controller deletes a not-ready pod
first, then the lowest cost): :func:`deletion_costs` gives each replica its cost in the rule's order; the
Kubernetes adapter does not write the annotation yet (docs/benchmarks/loop.md, "Session 13").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

# reason codes
NOT_READY = "victim_not_ready"  # a replica still starting (or waiting for a node): the newest such
NEWEST = "victim_newest"  # Kubernetes' default: the newest ready replica
DEAREST_EMPTIES_NODE = "victim_dearest_empties_node"  # on the dearest node per GPU-hour, alone there
DEAREST = "victim_dearest"  # on the dearest node per GPU-hour (its node keeps other pods)


class ReplicaView(NamedTuple):
    """One replica as the world sees it when its fleet scales down.

    ``price_usd_h``: what the GPUs under the replica cost per GPU-hour while they run (its node's tier price;
    0 for a replica not placed yet); ``committed``: its node is held under a reservation, paid whether used or
    not; ``alone``: no other pod runs on the replica's node(s), so stopping it empties them."""

    ready: bool
    node: int = -1
    price_usd_h: float = 0.0
    committed: bool = False
    alone: bool = False


@dataclass(frozen=True, slots=True)
class VictimChoice:
    index: int  # into the replicas as given (oldest first)
    reason: str


def saving_usd_h(r: ReplicaView) -> float:
    """What stopping the replica saves per GPU-hour once its node is gone: nothing on a reserved node."""
    return 0.0 if r.committed else r.price_usd_h


def _rank_keys(replicas: Sequence[ReplicaView], *, every: bool = False) -> list[tuple[float, bool, int]]:
    """The cost-aware rule's key of each ready replica (``every``: of each replica), larger: stopped first, oldest
    first: its saving (:func:`saving_usd_h`, written out: one comprehension over the fleet), alone on its node,
    newest. The index makes every key distinct, so ordering the keys themselves is the rule's order."""
    return [
        (0.0 if committed else price, alone, j)
        for j, (ready, _node, price, committed, alone) in enumerate(replicas)
        if every or ready
    ]


def _ranked(replicas: Sequence[ReplicaView], k: int, cost_aware: bool) -> list[VictimChoice]:
    n = len(replicas)
    if not 0 <= k <= n:
        raise ValueError(f"cannot stop {k} of {n} replicas")
    keys = _rank_keys(replicas) if cost_aware else None
    if keys is not None and len(keys) == n:  # every replica ready (the usual case): none to look for
        out: list[VictimChoice] = []
    else:
        starting = [i for i in range(n - 1, -1, -1) if not replicas[i].ready][:k]
        out = [VictimChoice(i, NOT_READY) for i in starting]
    m = k - len(out)
    if m <= 0:
        return out
    if keys is None:
        ready = [i for i in range(n) if replicas[i].ready]
        return out + [VictimChoice(i, NEWEST) for i in reversed(ready[-m:])]
    newest = {key[2] for key in keys[-m:]}  # what Kubernetes' default would stop
    # the m largest keys, largest first (heapq.nlargest's answer: keys are distinct), sorted in C
    top = [max(keys)] if m == 1 else sorted(keys, reverse=True)[:m]
    for _saving, alone, j in top:
        out.append(VictimChoice(j, NEWEST if j in newest else DEAREST_EMPTIES_NODE if alone else DEAREST))
    return out


def newest_first(replicas: Sequence[ReplicaView], k: int = 1) -> list[VictimChoice]:
    """Kubernetes' default for ``k`` replicas: the replicas not ready yet (newest first), then the newest."""
    return _ranked(replicas, k, cost_aware=False)


def dearest_first(replicas: Sequence[ReplicaView], k: int = 1) -> list[VictimChoice]:
    """gpufleet's rule for ``k`` replicas, ranked once on one observation: the replicas not ready yet (newest
    first), then the ready ones by (saving per GPU-hour, alone on its node, newest) (module docstring). Reason
    ``victim_newest`` for a replica that Kubernetes' default would have stopped in the same batch."""
    return _ranked(replicas, k, cost_aware=True)


def deletion_costs(replicas: Sequence[ReplicaView]) -> list[int]:
    """A ``controller.kubernetes.io/pod-deletion-cost`` per replica (lower: deleted first) in
    :func:`dearest_first`'s order among the ready replicas: the one it stops gets the lowest cost, the cheapest
    to keep (on a reserved node, the oldest) the highest. Kubernetes itself deletes not-ready pods first."""
    costs = [0] * len(replicas)
    for rank, (_saving, _alone, j) in enumerate(sorted(_rank_keys(replicas, every=True), reverse=True)):
        costs[j] = rank
    return costs


@dataclass(frozen=True, slots=True)
class VictimRule:
    """A loop's scale-down rule: ``cost_aware`` (:func:`dearest_first`) or Kubernetes' default
    (:func:`newest_first`)."""

    cost_aware: bool = False

    def choose(self, replicas: Sequence[ReplicaView], k: int = 1) -> list[VictimChoice]:
        """The ``k`` replicas to stop, ranked once on one observation (as Kubernetes' ReplicaSet controller ranks
        its pods once per sync and deletes the lowest ranked)."""
        return dearest_first(replicas, k) if self.cost_aware else newest_first(replicas, k)


KUBERNETES_DEFAULT = VictimRule(cost_aware=False)
COST_AWARE = VictimRule(cost_aware=True)
